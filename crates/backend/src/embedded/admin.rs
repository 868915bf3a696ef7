//! Administration of the embedded store's streams: what `/admin/…` answers and what
//! `sluice stream` prints when it opens the data directory itself.

use sluice_protocol::error::ApiError;
use sluice_protocol::subject::FilterSet;
use sluice_store::{PurgeRequest, SourceResume, SourceStatus, Store, StreamHandle};

use crate::BackendError;
use crate::admin::{
    LostReport, PurgeOptions, SourceProgress, SourceReport, StreamReport, bounded_subjects,
};
use crate::error::stream_not_found;

/// Stream `name` of `store`: a stream the store refused to load is its refusal, a missing one
/// 404/10059.
pub fn stream(store: &Store, name: &str) -> Result<StreamHandle, BackendError> {
    if let Some(refusal) = store
        .refused_streams()
        .into_iter()
        .find(|r| r.stream == name)
    {
        return Err(BackendError::Store(refusal.into()));
    }
    store
        .stream(name)
        .ok_or_else(|| stream_not_found(name).into())
}

/// `handle` described, subjects with their counts and sources included.
pub fn report(handle: &StreamHandle) -> StreamReport {
    let every_subject = FilterSet::new([">"]).ok();
    let info = handle.info(every_subject.as_ref());
    let state = info.state;
    let mut subjects = state.subjects.unwrap_or_default();
    let subjects_truncated = bounded_subjects(&mut subjects);
    StreamReport {
        name: handle.name().to_owned(),
        created: info.created.to_string(),
        incarnation: format!("{:x}", info.incarnation),
        messages: state.msgs,
        bytes: state.bytes,
        first_seq: state.first_seq,
        first_time: state.first_time.map(|t| t.to_string()),
        last_seq: state.last_seq,
        last_time: state.last_time.map(|t| t.to_string()),
        num_deleted: state.num_deleted,
        num_subjects: state.num_subjects,
        subjects,
        subjects_truncated,
        lost: LostReport {
            msgs: state.lost.msgs,
            bytes: state.lost.bytes,
            damaged: state.lost.damaged,
            unconfirmed: state.lost.unconfirmed,
        },
        sources: source_reports(handle),
        // A configuration of plain values always serializes.
        config: serde_json::to_value(&info.config).unwrap_or_default(),
    }
}

/// Each source of `handle` with its configured filter and its thread's status.
fn source_reports(handle: &StreamHandle) -> Vec<SourceReport> {
    let config = handle.config();
    handle
        .source_status()
        .into_iter()
        .map(|status| {
            let filter_subject = config
                .sources
                .iter()
                .find(|source| source.index_name() == status.index_name)
                .and_then(|source| source.filter_subject.clone());
            SourceReport {
                name: status.origin.clone(),
                filter_subject,
                progress: progress(&status),
            }
        })
        .collect()
}

fn progress(status: &SourceStatus) -> SourceProgress {
    SourceProgress::Embedded {
        resume: resume_label(status.resume),
        resumed_after: status.resumed_after,
        last_origin_seq: status.last_origin_seq,
        waiting_for_origin: status.waiting_for_origin,
        sourced: status.sourced,
        duplicates: status.duplicates,
        dropped: status.dropped,
        resets: status.resets,
    }
}

fn resume_label(resume: SourceResume) -> &'static str {
    match resume {
        SourceResume::Index => "index",
        SourceResume::BackwardScan => "backward_scan",
        SourceResume::OptStartSeq => "opt_start_seq",
        SourceResume::OptStartTime => "opt_start_time",
        SourceResume::AfterLastTime => "after_last_time",
        SourceResume::Start => "start",
    }
}

/// Purges `handle` as `purge` says; how many messages went.
pub async fn purge(handle: &StreamHandle, purge: PurgeOptions) -> Result<u64, BackendError> {
    let request = PurgeRequest {
        filter: purge.subject,
        keep: purge.keep,
        up_to_seq: purge.up_to_seq,
    };
    Ok(handle.purge(request).await?)
}

/// Deletes message `seq` of `handle`: 404/10037 naming it when there is none.
pub async fn delete(handle: &StreamHandle, seq: u64) -> Result<(), BackendError> {
    if handle.delete_msg(seq).await? {
        return Ok(());
    }
    Err(ApiError::no_message_found()
        .described(format!("stream {:?} has no message {seq}", handle.name()))
        .into())
}
