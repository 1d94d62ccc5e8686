//! The turn tracker: links each model call to the step before it, groups steps into turns and
//! turns into conversations, and closes turns. It holds ids and keyed hashes only, bounded in
//! bytes; what it has to forget is counted. One conversation's state and its memory estimate are
//! in `conversation.rs`.

use std::collections::{BTreeSet, HashMap, VecDeque};

use tokentap_analysis::LastInput;

use super::breakdown::{CallSpan, StepSpan};
use super::conversation::{
    finish, unindex, Conversation, LinkKey, OpenTurn, MAX_KEYS_PER_CONVERSATION, MAX_SLOTS_PER_KEY,
};
use super::schema::{TurnLink, TurnRecord, TurnRef, TurnStatus, TurnStep};
use super::step::{derived_id, StepInput, TurnHeaders};
use crate::trace::random_hex;
use crate::Outcome;

/// `[turns]` limits, validated by the server's config.
#[derive(Debug, Clone)]
pub struct TurnConfig {
    /// An open turn with no new step for this long closes (`Incomplete` or `Failed`).
    pub idle_close_ns: u64,
    /// A conversation with no new step for this long is forgotten: a later request that extends it
    /// starts a new conversation.
    pub conversation_idle_ns: u64,
    pub max_conversations: usize,
    /// Estimated bytes of all tracker state; the least recently active conversations go first.
    pub max_state_bytes: usize,
    /// Steps listed per turn (later ones are counted only).
    pub max_steps: usize,
    /// Tool calls tracked per turn.
    pub max_tool_calls: usize,
    pub headers: TurnHeaders,
    /// `[turns] fleet_key` is set: conversation hashes mean the same on every instance, so turn,
    /// conversation, trace and agent span ids are derived from the steps' [`TurnKeys`] instead of
    /// drawn at random, and every instance names a turn the same way.
    pub fleet: bool,
}

impl Default for TurnConfig {
    fn default() -> Self {
        Self {
            idle_close_ns: 120_000_000_000,
            conversation_idle_ns: 1_800_000_000_000,
            max_conversations: 10_000,
            max_state_bytes: 32 << 20,
            max_steps: 256,
            max_tool_calls: 1024,
            headers: TurnHeaders::default(),
            fleet: false,
        }
    }
}

/// What the tracker had to count rather than link or keep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnCounters {
    pub turns_opened: u64,
    pub turns_closed: u64,
    /// Conversations forgotten early to stay within `max_conversations` / `max_state_bytes`.
    pub conversations_evicted: u64,
    /// Requests ending in tool results whose ids match no tool call tokentap saw.
    pub unknown_tool_results: u64,
    /// Requests whose message prefix matched several conversations (left unlinked).
    pub ambiguous_prefixes: u64,
    pub steps_not_listed: u64,
    pub tool_calls_not_tracked: u64,
}

/// Where a step landed, and the turns that closed because of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub turn: TurnRef,
    pub closed: Vec<TurnRecord>,
}

pub struct TurnTracker {
    config: TurnConfig,
    next_slot: u64,
    conversations: HashMap<u64, Conversation>,
    index: HashMap<LinkKey, Vec<u64>>,
    /// Every conversation by when it was last seen: the least recently active are forgotten first.
    by_age: BTreeSet<(u64, u64)>,
    /// The conversations with an open turn, by when they were last seen: what a tick closes. Kept
    /// apart from `by_age` so that a tick visits only the turns it closes and the conversations
    /// it forgets, not every conversation idle longer than `idle_close_ns` and still remembered.
    open_by_age: BTreeSet<(u64, u64)>,
    bytes: usize,
    counters: TurnCounters,
}

/// An id from a client header: kept when it is short printable ASCII, else replaced by a hash of
/// it (records and spans never carry control characters a client chose).
fn id_from_header(value: &str) -> String {
    if value.len() <= 128 && value.bytes().all(|b| b.is_ascii_graphic()) {
        value.to_owned()
    } else {
        crate::trace::stable_hex(value.as_bytes(), 16)
    }
}

impl TurnTracker {
    pub fn new(config: TurnConfig) -> Self {
        Self {
            config,
            next_slot: 0,
            conversations: HashMap::new(),
            index: HashMap::new(),
            by_age: BTreeSet::new(),
            open_by_age: BTreeSet::new(),
            bytes: 0,
            counters: TurnCounters::default(),
        }
    }

    pub fn config(&self) -> &TurnConfig {
        &self.config
    }

    pub fn counters(&self) -> &TurnCounters {
        &self.counters
    }

    /// Open turns now.
    pub fn open_turns(&self) -> usize {
        // Every turn opened is closed exactly once (complete, idle, evicted or shut down), so the
        // counters give the number without walking every conversation (the worker publishes it
        // after each record).
        (self.counters.turns_opened - self.counters.turns_closed) as usize
    }

    /// Open turns, counted by walking every conversation (what [`Self::open_turns`] must equal).
    #[cfg(test)]
    pub(crate) fn open_turns_walked(&self) -> usize {
        self.conversations.values().filter(|c| c.open.is_some()).count()
    }

    /// Each conversation's last-seen time and whether it has an open turn.
    #[cfg(test)]
    pub(crate) fn ages(&self) -> Vec<(u64, bool)> {
        self.conversations.values().map(|c| (c.last_seen, c.open.is_some())).collect()
    }

    /// Whether both age indexes list exactly what they should: every conversation in `by_age`,
    /// those with an open turn in `open_by_age`, each at its `last_seen`.
    #[cfg(test)]
    pub(crate) fn age_indexes_agree(&self) -> bool {
        let all: BTreeSet<(u64, u64)> = self.conversations.iter().map(|(slot, c)| (c.last_seen, *slot)).collect();
        let open: BTreeSet<(u64, u64)> =
            self.conversations.iter().filter(|(_, c)| c.open.is_some()).map(|(slot, c)| (c.last_seen, *slot)).collect();
        all == self.by_age && open == self.open_by_age
    }

    pub fn conversations(&self) -> usize {
        self.conversations.len()
    }

    /// The tracker's memory as the allocator sees it (estimated from sizes and capacities; within
    /// a few tens of percent of the heap it holds, see `tests/turn_state_memory.rs`).
    pub fn state_bytes(&self) -> usize {
        self.bytes
    }

    fn lookup_unique(&self, key: &LinkKey) -> Result<Option<u64>, ()> {
        match self.index.get(key).map(Vec::as_slice) {
            None | Some([]) => Ok(None),
            Some([slot]) => Ok(Some(*slot)),
            Some(_) => Err(()),
        }
    }

    /// The earlier step's conversation, by the strongest rule that finds one.
    fn find(&mut self, step: &StepInput) -> Option<(u64, TurnLink)> {
        if step.parent_span_id.is_some() {
            if let Ok(Some(slot)) = self.lookup_unique(&LinkKey::Trace(step.trace_id.clone())) {
                return Some((slot, TurnLink::TraceId));
            }
        }
        if let Some(h) = &step.turn_header {
            if let Ok(Some(slot)) = self.lookup_unique(&LinkKey::TurnHeader(h.clone())) {
                return Some((slot, TurnLink::Header));
            }
        }
        if let Some(h) = &step.conversation_header {
            if let Ok(Some(slot)) = self.lookup_unique(&LinkKey::ConversationHeader(h.clone())) {
                return Some((slot, TurnLink::Header));
            }
        }
        // The newest results are last; history repeats older ones.
        for id in step.tool_result_ids.iter().rev() {
            if let Ok(Some(slot)) = self.lookup_unique(&LinkKey::Call(id.clone())) {
                return Some((slot, TurnLink::ToolResult));
            }
        }
        if let Some(id) = &step.previous_response_id {
            if let Ok(Some(slot)) = self.lookup_unique(&LinkKey::Response(id.clone())) {
                return Some((slot, TurnLink::PreviousResponse));
            }
        }
        // Longest prefix first: the most specific earlier request this one extends. The whole
        // list is not a prefix: an identical request (the same first "hi" from two users) is not
        // evidence of one conversation.
        let shorter = step.prefix_hashes.len().saturating_sub(1);
        for hash in step.prefix_hashes[..shorter].iter().rev() {
            match self.lookup_unique(&LinkKey::Prefix(*hash)) {
                Ok(Some(slot)) => return Some((slot, TurnLink::Prefix)),
                Ok(None) => {}
                Err(()) => {
                    self.counters.ambiguous_prefixes += 1;
                    return None;
                }
            }
        }
        None
    }

    /// Places one step; returns its turn reference and the turns it closed.
    pub fn observe(&mut self, step: StepInput) -> Placement {
        let mut closed = Vec::new();
        let found = self.find(&step);
        if step.last_input == Some(LastInput::ToolResult)
            && !step.tool_result_ids.is_empty()
            && !matches!(found, Some((_, TurnLink::ToolResult)))
            && !step.tool_result_ids.iter().any(|id| self.index.contains_key(&LinkKey::Call(id.clone())))
        {
            self.counters.unknown_tool_results += 1;
        }
        let slot = match found {
            Some((slot, _)) => slot,
            None => {
                let slot = self.next_slot;
                self.next_slot += 1;
                let starts_turn = step.last_input == Some(LastInput::User);
                let derived = || {
                    let key = step.keys.conversation(starts_turn).filter(|_| self.config.fleet)?;
                    Some(derived_id("conversation", key, 16))
                };
                let id = step
                    .conversation_header
                    .as_deref()
                    .map(id_from_header)
                    .or_else(derived)
                    .unwrap_or_else(|| random_hex(16));
                self.conversations.insert(
                    slot,
                    Conversation { id, turns_done: 0, open: None, keys: VecDeque::new(), last_seen: 0, bytes: 0 },
                );
                slot
            }
        };
        let link = found.map(|(_, link)| link);
        if let Some(conv) = self.conversations.get(&slot) {
            self.by_age.remove(&(conv.last_seen, slot));
            self.open_by_age.remove(&(conv.last_seen, slot));
        }

        // Does this step continue the open turn, or start the next one? An app that sends a turn
        // header decides; otherwise a new user message starts a turn.
        let turn_header_matched = step.turn_header.as_ref().is_some_and(|h| {
            self.index.get(&LinkKey::TurnHeader(h.clone())).is_some_and(|slots| slots.contains(&slot))
        });
        let Some(conv) = self.conversations.get_mut(&slot) else { unreachable!("slot just found or made") };
        // A continuation whose turn anchor differs belongs to another turn of the conversation
        // (its start went to another instance, or was forgotten).
        let same_anchor = conv.open.as_ref().is_some_and(|t| {
            t.anchor.is_none() || step.keys.turn_anchor.is_none() || t.anchor == step.keys.turn_anchor
        });
        let continues = conv.open.is_some()
            && if step.turn_header.is_some() {
                turn_header_matched
            } else {
                step.last_input != Some(LastInput::User) && same_anchor
            };
        if !continues {
            if let Some(turn) = conv.open.take() {
                let status = idle_status(&turn);
                closed.push(finish(conv, turn, status));
                self.counters.turns_closed += 1;
            }
            let starts_turn = step.last_input == Some(LastInput::User);
            let key = step.keys.turn(starts_turn).filter(|_| self.config.fleet && step.turn_header.is_none());
            let turn_id = step
                .turn_header
                .as_deref()
                .map(id_from_header)
                .or_else(|| key.map(|k| derived_id("turn", k, 16)))
                .unwrap_or_else(|| random_hex(16));
            // The client's trace (a `traceparent`) wins; else a fleet turn's own.
            let trace_id = match key {
                Some(k) if step.parent_span_id.is_none() => derived_id("trace", k, 16),
                _ => step.trace_id.clone(),
            };
            let fragment = step.last_input == Some(LastInput::ToolResult);
            conv.open = Some(OpenTurn {
                turn_id,
                trace_id,
                parent_span_id: step.parent_span_id.clone(),
                agent_span_id: None,
                started_at: step.started_at.clone(),
                route: step.route.clone(),
                t0: step.t0_unix_ns,
                steps: Vec::new(),
                steps_total: 0,
                calls: Vec::new(),
                last_failed: false,
                anchor: step.keys.turn_anchor,
                key,
                fragment,
            });
            self.counters.turns_opened += 1;
        }
        let first_of_turn = !continues;
        let Some(turn) = conv.open.as_mut() else { unreachable!("opened above") };
        let link = match (first_of_turn, link) {
            (true, None) => TurnLink::First,
            (true, Some(_)) => TurnLink::NextTurn,
            (false, Some(link)) => link,
            (false, None) => TurnLink::First,
        };
        turn.steps_total += 1;
        let step_no = turn.steps_total;

        // Results this request carries answer the turn's open calls.
        for call in turn.calls.iter_mut().filter(|c| c.result.is_none()) {
            if call.call_id.as_ref().is_some_and(|id| step.tool_result_ids.contains(id)) {
                call.result = Some((step_no, step.t0_unix_ns));
            }
        }
        for name in &step.tool_result_names {
            if let Some(call) = turn
                .calls
                .iter_mut()
                .find(|c| c.result.is_none() && c.call_id.is_none() && c.name.as_deref() == Some(name.as_str()))
            {
                call.result = Some((step_no, step.t0_unix_ns));
            }
        }
        for call in &step.tool_calls {
            if turn.calls.len() >= self.config.max_tool_calls {
                self.counters.tool_calls_not_tracked += 1;
                continue;
            }
            turn.calls.push(CallSpan {
                call_id: call.id.clone(),
                name: call.name.clone(),
                step: step_no,
                ready_unix_ns: call.ready_unix_ns,
                arguments_hash: call.arguments_hash,
                result: None,
            });
        }
        // An agent turn (tool calls made, or results carried by a fragment) gets its agent span.
        if (!step.tool_calls.is_empty() || turn.fragment && turn.key.is_some()) && turn.agent_span_id.is_none() {
            turn.agent_span_id = Some(turn.key.map_or_else(|| random_hex(8), |k| derived_id("invoke_agent", k, 8)));
        }
        let record_step = TurnStep {
            step: step_no,
            request_id: step.request_id.clone(),
            span_id: step.span_id.clone(),
            link,
            start_ms: step.t0_unix_ns.saturating_sub(turn.t0) as f64 / 1e6,
            end_ms: step.end_unix_ns.saturating_sub(turn.t0) as f64 / 1e6,
            outcome: step.outcome,
            model: step.model.clone(),
            ttft_answer_ms: step.ttft_answer_ms,
            ttft_tool_ms: step.ttft_tool_ms,
            tool_calls: step.tool_calls.len() as u32,
            input_tokens: step.input_tokens,
            output_tokens: step.output_tokens,
        };
        if turn.steps.len() < self.config.max_steps {
            turn.steps.push(StepSpan {
                step: record_step,
                start_unix_ns: step.t0_unix_ns,
                end_unix_ns: step.end_unix_ns,
                last_content_unix_ns: step.last_content_unix_ns,
            });
        } else {
            self.counters.steps_not_listed += 1;
        }
        turn.last_failed = step.outcome != Outcome::Ok;
        let turn_ref = TurnRef {
            turn_id: turn.turn_id.clone(),
            conversation_id: conv.id.clone(),
            step: step_no,
            link,
            trace_id: turn.trace_id.clone(),
            agent_span_id: turn.agent_span_id.clone(),
        };
        let final_answer = step.outcome == Outcome::Ok && step.tool_calls.is_empty();
        if final_answer {
            if let Some(turn) = conv.open.take() {
                closed.push(finish(conv, turn, TurnStatus::Complete));
                self.counters.turns_closed += 1;
            }
        }

        // Remember how a later request can find this conversation.
        let mut keys = Vec::new();
        if let Some(hash) = step.prefix_hashes.last() {
            keys.push(LinkKey::Prefix(*hash));
        }
        if let Some(id) = &step.response_id {
            keys.push(LinkKey::Response(id.clone()));
        }
        keys.extend(step.tool_calls.iter().filter_map(|c| c.id.clone()).map(LinkKey::Call));
        if step.parent_span_id.is_some() {
            keys.push(LinkKey::Trace(step.trace_id.clone()));
        }
        if let Some(h) = &step.turn_header {
            keys.push(LinkKey::TurnHeader(h.clone()));
        }
        if let Some(h) = &step.conversation_header {
            keys.push(LinkKey::ConversationHeader(h.clone()));
        }
        for key in keys {
            self.add_key(slot, key);
        }
        let Some(conv) = self.conversations.get_mut(&slot) else { unreachable!("still there") };
        conv.last_seen = conv.last_seen.max(step.end_unix_ns);
        self.by_age.insert((conv.last_seen, slot));
        if conv.open.is_some() {
            self.open_by_age.insert((conv.last_seen, slot));
        }
        let before = conv.bytes;
        conv.bytes = conv.estimate();
        self.bytes = self.bytes - before + conv.bytes;
        self.enforce_bounds(slot, &mut closed);
        Placement { turn: turn_ref, closed }
    }

    fn add_key(&mut self, slot: u64, key: LinkKey) {
        let slots = self.index.entry(key.clone()).or_default();
        if slots.contains(&slot) {
            return;
        }
        if slots.len() >= MAX_SLOTS_PER_KEY {
            return;
        }
        slots.push(slot);
        let Some(conv) = self.conversations.get_mut(&slot) else { return };
        conv.keys.push_back(key);
        if conv.keys.len() > MAX_KEYS_PER_CONVERSATION {
            if let Some(old) = conv.keys.pop_front() {
                unindex(&mut self.index, &old, slot);
            }
        }
    }

    /// Forgets the least recently active conversations until both bounds hold (never `keep`).
    fn enforce_bounds(&mut self, keep: u64, closed: &mut Vec<TurnRecord>) {
        while self.conversations.len() > self.config.max_conversations || self.bytes > self.config.max_state_bytes {
            let Some(&(seen, slot)) = self.by_age.iter().find(|(_, s)| *s != keep) else { break };
            self.by_age.remove(&(seen, slot));
            closed.extend(self.remove(slot, |_| TurnStatus::Evicted));
            self.counters.conversations_evicted += 1;
        }
    }

    /// Removes a conversation (the caller has taken it out of `by_age`); its open turn, if any,
    /// closes with the status `status` gives it.
    fn remove(&mut self, slot: u64, status: impl FnOnce(&OpenTurn) -> TurnStatus) -> Option<TurnRecord> {
        let mut conv = self.conversations.remove(&slot)?;
        self.open_by_age.remove(&(conv.last_seen, slot));
        self.bytes -= conv.bytes;
        for key in &conv.keys {
            unindex(&mut self.index, key, slot);
        }
        let turn = conv.open.take()?;
        self.counters.turns_closed += 1;
        let status = status(&turn);
        Some(finish(&mut conv, turn, status))
    }

    /// The open agent turns' tool calls ready by `at_unix_ns` and not yet answered, with their
    /// turn's trace id, agent span id and index among the turn's calls (`mcp_trace`).
    pub(crate) fn waiting_calls(&self, at_unix_ns: u64) -> impl Iterator<Item = (&str, &str, usize, &CallSpan)> {
        let turns = self.conversations.values().filter_map(|c| c.open.as_ref());
        turns.filter_map(|t| Some((t, t.agent_span_id.as_deref()?))).flat_map(move |(t, agent)| {
            let waiting =
                t.calls.iter().enumerate().filter(move |(_, c)| c.result.is_none() && c.ready_unix_ns <= at_unix_ns);
            waiting.map(move |(i, c)| (t.trace_id.as_str(), agent, i, c))
        })
    }

    /// Closes turns idle longer than `idle_close_ns` and forgets conversations idle longer than
    /// `conversation_idle_ns`, as of `now_unix_ns`.
    pub fn tick(&mut self, now_unix_ns: u64) -> Vec<TurnRecord> {
        let mut closed = Vec::new();
        let idle_close = now_unix_ns.saturating_sub(self.config.idle_close_ns);
        // Only conversations whose turn would close are forgotten (as ever, when
        // `conversation_idle_ns` is the shorter of the two).
        let forget = now_unix_ns.saturating_sub(self.config.conversation_idle_ns).min(idle_close);
        // Both walks visit only entries they remove: a tick costs what it closes and forgets.
        while let Some(&(seen, slot)) = self.by_age.first().filter(|(seen, _)| *seen < forget) {
            self.by_age.remove(&(seen, slot));
            closed.extend(self.remove(slot, idle_status));
        }
        while let Some(&(seen, slot)) = self.open_by_age.first().filter(|(seen, _)| *seen < idle_close) {
            self.open_by_age.remove(&(seen, slot));
            if let Some(conv) = self.conversations.get_mut(&slot) {
                if let Some(turn) = conv.open.take() {
                    let status = idle_status(&turn);
                    closed.push(finish(conv, turn, status));
                    self.counters.turns_closed += 1;
                    let before = conv.bytes;
                    conv.bytes = conv.estimate();
                    self.bytes = self.bytes - before + conv.bytes;
                }
            }
        }
        closed
    }

    /// Closes every open turn (`Shutdown`), for a clean stop.
    pub fn close_all(&mut self) -> Vec<TurnRecord> {
        let mut closed = Vec::new();
        for conv in self.conversations.values_mut() {
            if let Some(turn) = conv.open.take() {
                closed.push(finish(conv, turn, TurnStatus::Shutdown));
                self.counters.turns_closed += 1;
            }
        }
        self.open_by_age.clear();
        closed
    }
}

/// How a turn that no step finished closes: `Failed` when its last step failed, else `Incomplete`.
fn idle_status(turn: &OpenTurn) -> TurnStatus {
    if turn.last_failed {
        TurnStatus::Failed
    } else {
        TurnStatus::Incomplete
    }
}
