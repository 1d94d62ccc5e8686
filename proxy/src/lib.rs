//! tokentap: a streaming reverse proxy for LLM APIs that shows where a user's wait goes.
//!
//! See ARCHITECTURE.md at the repository root for the code map and the invariants.

pub mod ack;
pub mod admin;
pub mod browser;
pub mod config;
pub mod dashboard;
pub mod demo;
pub mod export;
pub mod finalize;
pub mod hops;
pub mod internal;
pub mod pages;
pub mod privacy;
pub mod proxy;
pub mod record;
pub mod report;
pub mod route;
pub mod server;
pub mod store;
pub mod summary;
pub mod timeline;
pub mod trace;
