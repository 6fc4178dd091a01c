//! W12: Llama-family generation (prefill, then decode with a KV cache), batch 1.

use crate::report::Row;
use crate::timing::Plan;

/// The W12 rows; returns lines to print after the table. `args` are the `--w12-*` options.
pub fn rows(_rows: &mut Vec<Row>, _plan: Plan, _args: &[(String, String)]) -> Vec<String> {
    vec!["W12: not implemented yet (in progress this session)".to_string()]
}
