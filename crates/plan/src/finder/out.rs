//! The queue of outputs the race has decided on and the driver has not polled yet.

use fastfallback_proto::Output;

/// The race's outputs waiting to be polled, first in first out. Most turns produce one: it
/// waits in `first`, and only a turn that produces more uses `rest` (allocated then). `rest`
/// holds a handful at most, so it is a `Vec` taken from the front, 8 bytes smaller than a
/// `VecDeque`.
#[derive(Clone, Debug, Default)]
pub(super) struct OutQueue {
    first: Option<Output>,
    rest: Vec<Output>,
}

impl OutQueue {
    /// Queues `out` behind every output already waiting.
    pub(super) fn push_back(&mut self, out: Output) {
        // `first` is the head of the queue: it may take a new output only when it is empty.
        if self.first.is_none() && self.rest.is_empty() {
            self.first = Some(out);
        } else {
            self.rest.push(out);
        }
    }

    /// Takes the oldest output waiting.
    pub(super) fn pop_front(&mut self) -> Option<Output> {
        if self.first.is_some() {
            return self.first.take();
        }
        (!self.rest.is_empty()).then(|| self.rest.remove(0))
    }

    /// Whether nothing waits.
    pub(super) fn is_empty(&self) -> bool {
        self.first.is_none() && self.rest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fastfallback_proto::{Query, QueryKind};

    fn query(kind: QueryKind) -> Output {
        Output::StartQuery(Query::origin(kind))
    }

    #[test]
    fn the_output_queue_is_first_in_first_out_across_its_inline_head() {
        let mut q = OutQueue::default();
        assert!(q.is_empty());
        q.push_back(query(QueryKind::Https));
        q.push_back(query(QueryKind::Aaaa));
        assert_eq!(q.pop_front(), Some(query(QueryKind::Https)));
        // The head is free but an older output waits behind it: a new one goes last.
        q.push_back(query(QueryKind::A));
        assert!(!q.is_empty());
        assert_eq!(q.pop_front(), Some(query(QueryKind::Aaaa)));
        assert_eq!(q.pop_front(), Some(query(QueryKind::A)));
        assert_eq!(q.pop_front(), None);
        assert!(q.is_empty());
        q.push_back(query(QueryKind::A));
        assert_eq!(q.pop_front(), Some(query(QueryKind::A)));
    }
}
