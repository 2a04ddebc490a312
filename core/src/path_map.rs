//! Paths across a sandbox link: a devcontainer or `docker run` mounts the
//! workspace elsewhere (`/workspaces/<name>`, `/src`, `/app`), and the IDE
//! protocol's paths are absolute. A [`PathMap`] holds the user's
//! `HOST=INSIDE` pairs and maps a path both ways, by whole components;
//! a path that maps to nothing is refused ([`Unmapped`]), never guessed.
//! Pure: the link applies it to every path that crosses.

use std::path::{Component, Path, PathBuf};

/// A path from one side that no pair of the map covers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path:?} is not under any mapped folder ({side})")]
pub struct Unmapped {
    pub path: String,
    /// "inside the sandbox" or "on this machine".
    pub side: &'static str,
}

/// One `HOST=INSIDE` pair: both absolute and clean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPair {
    pub host: PathBuf,
    pub inside: PathBuf,
}

impl std::str::FromStr for PathPair {
    type Err = String;

    /// `HOST=INSIDE`, both absolute, without `..`.
    fn from_str(s: &str) -> Result<PathPair, String> {
        let (host, inside) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?} is not HOST=INSIDE"))?;
        let clean = |p: &str, which: &str| {
            clean_absolute(p)
                .ok_or_else(|| format!("{which} path {p:?} must be absolute, without `..`"))
        };
        Ok(PathPair {
            host: clean(host, "the host")?,
            inside: clean(inside, "the sandbox's")?,
        })
    }
}

impl std::fmt::Display for PathPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.host.display(), self.inside.display())
    }
}

/// The pairs of one link. Empty: every path is the same on both sides
/// (the sandbox mounts the workspace where it is).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathMap {
    pairs: Vec<PathPair>,
}

impl PathMap {
    pub fn new(pairs: Vec<PathPair>) -> PathMap {
        PathMap { pairs }
    }

    pub fn is_identity(&self) -> bool {
        self.pairs.is_empty()
    }

    pub fn pairs(&self) -> &[PathPair] {
        &self.pairs
    }

    /// A path the sandbox named, as this machine knows it.
    pub fn to_host(&self, inside: &str) -> Result<String, Unmapped> {
        self.map(inside, |p| (&p.inside, &p.host), "inside the sandbox")
    }

    /// A path of this machine, as the sandbox knows it.
    pub fn to_inside(&self, host: &str) -> Result<String, Unmapped> {
        self.map(host, |p| (&p.host, &p.inside), "on this machine")
    }

    /// The longest `from` folder holding `path` (by whole components)
    /// wins; `..` is refused before any mapping, so no path climbs out.
    fn map(
        &self,
        path: &str,
        sides: impl Fn(&PathPair) -> (&PathBuf, &PathBuf),
        side: &'static str,
    ) -> Result<String, Unmapped> {
        if self.is_identity() {
            return Ok(path.to_owned());
        }
        let unmapped = || Unmapped {
            path: path.to_owned(),
            side,
        };
        let clean = clean_absolute(path).ok_or_else(unmapped)?;
        let best = self
            .pairs
            .iter()
            .map(&sides)
            .filter(|(from, _)| clean.starts_with(from))
            .max_by_key(|(from, _)| from.components().count())
            .ok_or_else(unmapped)?;
        let rest = clean.strip_prefix(best.0).expect("checked by starts_with");
        let mapped = if rest.as_os_str().is_empty() {
            best.1.clone()
        } else {
            best.1.join(rest)
        };
        mapped
            .into_os_string()
            .into_string()
            .map_err(|_| unmapped())
    }

    /// A `file://` URI of one side as the other's, through `map_path`;
    /// anything else (another scheme, a relative text) as it is.
    pub fn map_uri(
        &self,
        uri: &str,
        map_path: impl Fn(&PathMap, &str) -> Result<String, Unmapped>,
    ) -> Result<String, Unmapped> {
        let Some(rest) = uri.strip_prefix("file://") else {
            return Ok(uri.to_owned());
        };
        let Ok(url) = lsp_types::Url::parse(uri) else {
            return Err(Unmapped {
                path: rest.to_owned(),
                side: "in a URI",
            });
        };
        let Ok(path) = url.to_file_path() else {
            return Err(Unmapped {
                path: rest.to_owned(),
                side: "in a URI",
            });
        };
        let path = path.to_string_lossy().into_owned();
        let mapped = map_path(self, &path)?;
        lsp_types::Url::from_file_path(&mapped)
            .map(|u| u.to_string())
            .map_err(|()| Unmapped {
                path: mapped,
                side: "in a URI",
            })
    }
}

/// `p` absolute, with `.` dropped; `None` with `..` or if relative.
fn clean_absolute(p: &str) -> Option<PathBuf> {
    let path = Path::new(p);
    if !path.is_absolute() || p.contains('\0') {
        return None;
    }
    let mut clean = PathBuf::from("/");
    for c in path.components() {
        match c {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(part) => clean.push(part),
            Component::ParentDir | Component::Prefix(_) => return None,
        }
    }
    Some(clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[&str]) -> PathMap {
        PathMap::new(pairs.iter().map(|p| p.parse().unwrap()).collect())
    }

    #[test]
    fn pairs_parse_or_say_why_not() {
        let pair: PathPair = "/home/me/proj=/workspaces/proj".parse().unwrap();
        assert_eq!(pair.host, Path::new("/home/me/proj"));
        assert_eq!(pair.to_string(), "/home/me/proj=/workspaces/proj");
        assert!(
            "/a".parse::<PathPair>()
                .unwrap_err()
                .contains("HOST=INSIDE")
        );
        assert!("a=/b".parse::<PathPair>().unwrap_err().contains("absolute"));
        assert!(
            "/a=/b/../c"
                .parse::<PathPair>()
                .unwrap_err()
                .contains("`..`")
        );
        // A trailing slash or a `.` is the same folder.
        let pair: PathPair = "/home/me/proj/=/src/./".parse().unwrap();
        assert_eq!(pair.inside, Path::new("/src"));
    }

    #[test]
    fn paths_map_both_ways_by_whole_components() {
        let m = map(&["/home/me/proj=/workspaces/proj", "/home/me/.cargo=/cargo"]);
        assert_eq!(
            m.to_host("/workspaces/proj/src/main.rs").unwrap(),
            "/home/me/proj/src/main.rs"
        );
        assert_eq!(m.to_host("/workspaces/proj").unwrap(), "/home/me/proj");
        assert_eq!(
            m.to_inside("/home/me/proj/src/main.rs").unwrap(),
            "/workspaces/proj/src/main.rs"
        );
        assert_eq!(m.to_inside("/home/me/.cargo/x").unwrap(), "/cargo/x");
        // Not a prefix by text: /workspaces/project is not /workspaces/proj.
        assert!(m.to_host("/workspaces/project/a").is_err());
        // Outside every mapping, `..` out of one, relative: refused.
        let refused = m.to_host("/etc/passwd").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "\"/etc/passwd\" is not under any mapped folder (inside the sandbox)"
        );
        assert!(m.to_host("/workspaces/proj/../../etc/passwd").is_err());
        assert!(m.to_host("src/main.rs").is_err());
        // No map: the same path on both sides.
        assert_eq!(PathMap::default().to_host("/x/y").unwrap(), "/x/y");
    }

    #[test]
    fn the_longest_folder_wins() {
        let m = map(&["/home/me=/me", "/home/me/proj=/src"]);
        assert_eq!(m.to_inside("/home/me/proj/a").unwrap(), "/src/a");
        assert_eq!(m.to_inside("/home/me/other/a").unwrap(), "/me/other/a");
        assert_eq!(m.to_host("/src/a").unwrap(), "/home/me/proj/a");
    }

    #[test]
    fn uris_map_with_their_escapes() {
        let m = map(&["/home/me/my proj=/workspaces/p"]);
        assert_eq!(
            m.map_uri("file:///workspaces/p/a%20b.rs", PathMap::to_host)
                .unwrap(),
            "file:///home/me/my%20proj/a%20b.rs"
        );
        assert_eq!(
            m.map_uri("untitled:Untitled-1", PathMap::to_host).unwrap(),
            "untitled:Untitled-1"
        );
        assert!(m.map_uri("file:///etc/passwd", PathMap::to_host).is_err());
    }
}
