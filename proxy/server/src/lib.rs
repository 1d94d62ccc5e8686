//! tokentap: a streaming reverse proxy for LLM APIs that shows where a user's wait goes.
//!
//! The server crate: the only one that depends on pingora. The record schema and its derivations
//! are in `tokentap-record`, aggregates and renderings in `tokentap-report`, OpenTelemetry in
//! `tokentap-telemetry`, the stream analysis in `tokentap-analysis`. See ARCHITECTURE.md at the
//! repository root for the crate map, the data path and the invariants.
//!
//! - `forward/`: the pingora proxy (the hooks), requests tokentap answers itself, redaction.
//! - `request_data`, `timeline`, `route`: what the hooks gather, their stamps, the route table.
//! - `pipeline/`: the bounded queue, the worker and record building.
//! - `store`: the journal, the ring and the live feed.
//! - `admin`, `dashboard`: the admin API and the dashboard page.
//! - `config`, `server`, `demo`, `pages`: configuration, start-up, `tokentap demo`, embedded pages.
//! - `bench`: the tokentap that `tokentap bench` embeds in front of its target (the load driver is
//!   `tokentap-bench`).

mod admin;
mod admission;
pub mod bench;
pub mod config;
mod dashboard;
pub mod demo;
mod forward;
mod pages;
mod pipeline;
mod request_data;
mod route;
mod scheduling_lag;
pub mod server;
mod store;
mod timeline;
