//! Ids given on the command line by a unique prefix, as git takes commit
//! ids: `agent show 3f2a`, `changes undo 1`.

use crate::error::{Error, Result};
use crate::printable::one_line;

/// The one id of `ids` that is `given` or, failing that, starts with it;
/// `noun` names them in the error ("session", "change set") and `listing`
/// the command that lists them.
pub fn pick<'a>(
    given: &str,
    ids: impl IntoIterator<Item = &'a str>,
    noun: &str,
    listing: &str,
) -> Result<&'a str> {
    if given.is_empty() {
        return Err(Error::Invalid(format!(
            "give a {noun} id (`{listing}` shows them)"
        )));
    }
    let ids: Vec<&str> = ids.into_iter().collect();
    if let Some(exact) = ids.iter().find(|id| **id == given) {
        return Ok(exact);
    }
    let matching: Vec<&str> = ids.into_iter().filter(|id| id.starts_with(given)).collect();
    match matching.as_slice() {
        [one] => Ok(one),
        [] => Err(Error::Invalid(format!(
            "there is no {noun} {} in this workspace (`{listing}` shows them)",
            one_line(given)
        ))),
        many => Err(Error::Invalid(format!(
            "{} starts {} {noun} ids ({}); give more of it",
            one_line(given),
            many.len(),
            many.iter()
                .take(3)
                .map(|id| one_line(id))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::pick;

    #[test]
    fn an_exact_id_wins_then_a_unique_prefix() {
        let ids = ["1", "12", "130", "2"];
        let set = |given| pick(given, ids, "change set", "changes list --all");
        assert_eq!(set("1").unwrap(), "1");
        assert_eq!(set("13").unwrap(), "130");
        assert_eq!(
            set("3").unwrap_err().to_string(),
            "there is no change set 3 in this workspace (`changes list --all` shows them)"
        );
        assert_eq!(
            set("").unwrap_err().to_string(),
            "give a change set id (`changes list --all` shows them)"
        );
        let ids = ["abc1", "abc2"];
        assert_eq!(
            pick("ab", ids, "session", "agent list")
                .unwrap_err()
                .to_string(),
            "ab starts 2 session ids (abc1, abc2); give more of it"
        );
    }
}
