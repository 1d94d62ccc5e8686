//! tokentap browser probe.
//!
//! This crate is a placeholder: the WASM probe that stamps chunk arrival, text paint and audio start
//! in the browser is not written yet. See README.md in this folder.
