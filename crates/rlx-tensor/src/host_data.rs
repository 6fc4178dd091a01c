//! Typed host data fed to compiled functions.
