//! Agent mode: the mock behaves like a model inside a client's tool loop. A new user message is
//! answered with tool calls; tool results are answered with another round of calls until the turn
//! has done its rounds, then with the final text answer.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::conversation::Conversation;

/// Responses answered in agent mode so far, in this process: mixed into their ids.
static AGENT_RESPONSES: AtomicU64 = AtomicU64::new(0);

/// How one agent turn goes, resolved per request from flags, the scenario and headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AgentPlan {
    /// Tool rounds before the final answer (`x-mock-agent-steps`).
    pub(crate) steps: u32,
    /// Tool calls in each round, sent in parallel in one response (`x-mock-agent-parallel`).
    pub(crate) parallel: u32,
}

/// What the model does in this step of the turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AgentMove {
    /// Call `count` tools in parallel.
    CallTools { count: u32 },
    /// Give the final text answer.
    Answer,
}

impl AgentPlan {
    /// Tool calls while the turn has done fewer than `steps` rounds and the request offers tools.
    pub(crate) fn next_move(&self, offered_tools: usize, conversation: &Conversation) -> AgentMove {
        if offered_tools > 0 && conversation.tool_rounds() < self.steps {
            AgentMove::CallTools { count: self.parallel.max(1) }
        } else {
            AgentMove::Answer
        }
    }
}

/// A number no other agent-mode response of this process gets, so that identical requests still
/// get distinct ids, as a real provider's would be.
pub(crate) fn response_nonce() -> u64 {
    AGENT_RESPONSES.fetch_add(1, Ordering::Relaxed) ^ (u64::from(std::process::id()) << 40)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conversation::Turn;

    #[test]
    fn moves_follow_rounds_and_steps() {
        let user = Conversation::from_turns(vec![Turn::User]);
        let one_round = Conversation::from_turns(vec![Turn::User, Turn::ToolCalls, Turn::ToolResults]);
        let plan = |steps| AgentPlan { steps, parallel: 2 };
        assert_eq!(plan(1).next_move(1, &user), AgentMove::CallTools { count: 2 });
        assert_eq!(plan(1).next_move(1, &one_round), AgentMove::Answer);
        assert_eq!(plan(2).next_move(1, &one_round), AgentMove::CallTools { count: 2 });
        assert_eq!(plan(0).next_move(1, &user), AgentMove::Answer);
        assert_eq!(plan(1).next_move(0, &user), AgentMove::Answer);
        assert_ne!(response_nonce(), response_nonce());
    }
}
