//! Arbitrary bytes as a browser probe report: parsed and validated as ingest does, and every report
//! that passes is joined to a record, which must then still serialize (no NaN or infinity slips
//! through into a record that `tokentap report` could not read back).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tokentap_record::browser::ProbeReport;

fuzz_target!(|data: &[u8]| {
    let Ok(report) = ProbeReport::parse(data) else { return };
    let mut record = tokentap_record::fixtures::stream_record(4);
    record.browser = Some(tokentap_record::join::join(&record, &report));
    let json = serde_json::to_string(&record).expect("a joined record serializes");
    let back: tokentap_record::Record = serde_json::from_str(&json).expect("and reads back");
    assert_eq!(back.browser.is_some(), true);
});
