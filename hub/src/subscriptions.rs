//! Who hears which topic: the one subscription table of the hub, for agent
//! sessions and terminals alike.

use std::collections::{BTreeSet, HashMap};

use crate::{EditorId, Topic};

#[derive(Default)]
pub(crate) struct Subscriptions {
    by_editor: HashMap<EditorId, BTreeSet<Topic>>,
}

impl Subscriptions {
    pub(crate) fn subscribe(&mut self, editor: EditorId, topic: Topic) {
        self.by_editor.entry(editor).or_default().insert(topic);
    }

    pub(crate) fn unsubscribe(&mut self, editor: EditorId, topic: &Topic) {
        if let Some(topics) = self.by_editor.get_mut(&editor) {
            topics.remove(topic);
        }
    }

    /// A connection went away.
    pub(crate) fn detach(&mut self, editor: EditorId) {
        self.by_editor.remove(&editor);
    }

    /// The topic is gone: nobody hears it any more.
    pub(crate) fn end(&mut self, topic: &Topic) {
        for topics in self.by_editor.values_mut() {
            topics.remove(topic);
        }
    }

    /// The connections that hear what is published on `topic`, in id order.
    pub(crate) fn subscribers(&self, topic: &Topic) -> Vec<EditorId> {
        let mut editors: Vec<EditorId> = self
            .by_editor
            .iter()
            .filter(|(_, topics)| topics.iter().any(|t| t.hears(topic)))
            .map(|(editor, _)| *editor)
            .collect();
        editors.sort();
        editors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_sessions_hears_every_session_but_no_terminal() {
        let mut subs = Subscriptions::default();
        let (a, b) = (EditorId(1), EditorId(2));
        subs.subscribe(a, Topic::AllSessions);
        subs.subscribe(b, Topic::Session("s1".into()));
        subs.subscribe(b, Topic::Terminal(7));
        assert_eq!(subs.subscribers(&Topic::Session("s1".into())), [a, b]);
        assert_eq!(subs.subscribers(&Topic::Session("s2".into())), [a]);
        assert_eq!(subs.subscribers(&Topic::Terminal(7)), [b]);
        subs.end(&Topic::Terminal(7));
        assert!(subs.subscribers(&Topic::Terminal(7)).is_empty());
        subs.unsubscribe(a, &Topic::AllSessions);
        assert_eq!(subs.subscribers(&Topic::Session("s2".into())), []);
        subs.detach(b);
        assert!(subs.subscribers(&Topic::Session("s1".into())).is_empty());
    }
}
