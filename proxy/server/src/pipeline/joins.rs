//! Joins on the worker: a browser probe report to its request's record, and an egress record to
//! its ingress record (multi-hop chains).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::route::RouteRole;
use crate::store::RecordStore;
use tokentap_record::browser::ProbeReport;
use tokentap_record::Record;
use tokentap_telemetry::Telemetry;

use super::stats::PipelineStats;
use super::turns::rejoin_turn;

pub(super) fn join_report(
    report: ProbeReport,
    store: &RecordStore,
    stats: &PipelineStats,
    telemetry: &Telemetry,
    pending: &mut VecDeque<(Instant, ProbeReport)>,
) {
    let (stored, by_header) = match store.find_by_trace(&report.trace_id, &report.span_id) {
        Some(stored) => (stored, false),
        None => match store.find_by_page_trace(&report.trace_id) {
            Some(stored) => (stored, true),
            None => {
                pending.push_back((Instant::now(), report));
                return;
            }
        },
    };
    let mut record = stored.record.clone();
    let mut browser = tokentap_record::join::join(&record, &report);
    if by_header {
        browser.joined_by = tokentap_record::browser::arrival::JoinedBy::Header;
    }
    record.browser = Some(browser);
    record.diagnosis = rediagnose(&record, store);
    telemetry.observe_browser(&record);
    let turn_id = record.turn.as_ref().map(|t| t.turn_id.clone());
    match store.update(record) {
        Ok(()) => {
            stats.browser_joined.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => tracing::warn!(error = %e, "could not write a joined record"),
    }
    if let Some(turn_id) = turn_id {
        rejoin_turn(&turn_id, store, telemetry);
    }
}

/// The record's diagnosis: over the whole chain when an egress record is joined to it.
pub(super) fn rediagnose(record: &Record, store: &RecordStore) -> Option<tokentap_record::hops::Diagnosis> {
    if let Some(egress) = record.chain.as_ref().and_then(|c| store.get(&c.egress_request_id)) {
        return tokentap_record::diagnosis::diagnose_chain(record, &egress.record);
    }
    tokentap_record::diagnosis::diagnose(record)
}

/// When `record` is one end of a chain (an ingress or egress route) and the other end of the same
/// trace is in the store, writes the ingress record again with the chain's diagnosis.
pub(super) fn join_chain(record: &Record, store: &RecordStore) {
    let Some(pair) = store.find_chain_peer(record) else { return };
    let (ingress, egress) = match record.route_role {
        Some(RouteRole::Ingress) => (record.clone(), pair.record.clone()),
        Some(RouteRole::Egress) => (pair.record.clone(), record.clone()),
        None => return,
    };
    let Some(diagnosis) = tokentap_record::diagnosis::diagnose_chain(&ingress, &egress) else { return };
    let mut joined = ingress;
    joined.chain = Some(tokentap_record::hops::Chain {
        egress_request_id: egress.request_id.clone(),
        egress_route: egress.route.clone(),
        aligned_events: diagnosis.events,
    });
    joined.diagnosis = Some(diagnosis);
    if let Err(e) = store.update(joined) {
        tracing::warn!(error = %e, "could not write a chained record");
    }
}
