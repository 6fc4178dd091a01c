//! Parameter initializers and a seeded host random-number generator.
