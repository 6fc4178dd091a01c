//! Optimizer steps from gradients computed elsewhere (feature `optim`): the building block
//! of data-parallel training, where each process computes gradients on its shard and the
//! averaged gradients drive one identical update everywhere.
