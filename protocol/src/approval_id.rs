//! An approval's id: `<session>/<number>`, the number counting the
//! session's questions from 1. Parsed here only, so nobody takes ids apart
//! by hand.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ApprovalId {
    session: String,
    number: u64,
}

impl ApprovalId {
    /// The `number`th question of `session` (a session id has no `/`).
    pub fn new(session: &str, number: u64) -> ApprovalId {
        debug_assert!(!session.contains('/'), "a session id has no /");
        ApprovalId {
            session: session.to_owned(),
            number,
        }
    }

    /// `None` unless `raw` is `<session>/<number>`.
    pub fn parse(raw: &str) -> Option<ApprovalId> {
        let (session, number) = raw.split_once('/')?;
        let number = number
            .bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| number.parse().ok())??;
        (!session.is_empty()).then(|| ApprovalId::new(session, number))
    }

    /// The session that asked.
    pub fn session(&self) -> &str {
        &self.session
    }
}

impl fmt::Display for ApprovalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.session, self.number)
    }
}

impl Serialize for ApprovalId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ApprovalId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ApprovalId, D::Error> {
        let raw = String::deserialize(d)?;
        ApprovalId::parse(&raw)
            .ok_or_else(|| serde::de::Error::custom(format!("{raw:?} is not an approval id")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_junk_is_refused() {
        let id = ApprovalId::parse("5e55/12").unwrap();
        assert_eq!((id.session(), id.to_string().as_str()), ("5e55", "5e55/12"));
        for junk in ["", "5e55", "/1", "5e55/", "5e55/x", "5e55/1/2", "5e55/+1"] {
            assert_eq!(ApprovalId::parse(junk), None, "{junk:?}");
        }
    }
}
