//! Priority and multivalue: eligible endpoints by priority (lowest first, ties by config
//! order); priority answers with the first, multivalue with up to `max_answers`.
use super::Choice;

pub(super) fn pick(c: &Choice<'_, '_>) -> Vec<usize> {
    let mut order: Vec<usize> = c.eligible().collect();
    order.sort_by_key(|&i| (c.candidates[i].priority, i));
    order.truncate(usize::from(c.max_answers));
    order
}
