//! The transcript store: one agent session's records as JSON lines in
//! `<chats>/<id>.jsonl` (the workspace's folder in the user's state
//! directory, never the workspace: `crate::user_state`), appended
//! crash-safely.
//!
//! This module owns the transcript file: creating it (0600, never through a
//! symlink), the advisory lock that keeps a second writer out, recovery of
//! its tail after a crash, validation of every line, quarantine of a damaged
//! file, and appends. The rules follow security.md A11 and hostile cases
//! 53–55:
//!
//! - A record is one line, `<JSON object>\n`, handed to the kernel in **one**
//!   `write` and then `fdatasync`ed. It is acknowledged (its sequence number
//!   returned) only after both succeeded. A crash can therefore leave at most
//!   one unacknowledged record at the end, whole or torn, and never a `\n`
//!   inside a torn one, because `\n` is the last byte written.
//! - On open, bytes after the last `\n` are that tail: a whole JSON object
//!   gets its `\n` back; anything else (a partial object, a code point cut in
//!   half) is cut back to the last `\n`. Without this the next append would
//!   be glued to the torn bytes and an acknowledged record would be lost
//!   (the recurring bug of A11).
//! - A complete line (one ending in `\n`) that is not a JSON object did not
//!   come from a torn append. It is never skipped or cut: the transcript
//!   becomes read-only, a copy is quarantined next to it
//!   (`<id>.jsonl.corrupt-<n>`) and [`Transcript::records`] still returns
//!   every valid record after it, with the positions of the bad lines.
//! - A failed append (short write, `ENOSPC`, `EIO`, a failed sync) cuts the
//!   file back to its length before the append and returns the error; if
//!   even that fails, the next append retries the cut first.
//!
//! Every change to the file goes through [`AppendIo`], the seam where tests
//! inject faults. Sequence numbers are 0-based line indexes; the line
//! numbers in errors and [`BadLine`] are 1-based, as editors show them.
//!
//! Not handled here: confinement of the folder path (only the file itself is
//! opened `O_NOFOLLOW`; callers build the path from the workspace root, see
//! [`path_for`]), and power loss on file systems that may expose a grown
//! file's unwritten blocks as zeros (these read as a torn tail if they are
//! the last line, and as damage otherwise).

use std::ffi::OsString;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

/// Largest record, in bytes of JSON (its `\n` not counted). A longer line in
/// a file is reported as bad, never read into memory whole.
pub const MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;

/// How many quarantine copies (`.corrupt-1` …) of one transcript we keep
/// before refusing to make more.
const MAX_QUARANTINE_COPIES: u32 = 1000;

/// Read buffer of the line scanner.
const SCAN_BUFFER: usize = 256 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("transcript {path} is a symbolic link; refusing to follow it")]
    Symlink { path: PathBuf },
    #[error("transcript {path} is not a regular file")]
    NotRegularFile { path: PathBuf },
    #[error("transcript {path} belongs to another user")]
    NotOurs { path: PathBuf },
    #[error(
        "transcript {path} has {links} hard links; refusing to append through a name that may lead to a file elsewhere"
    )]
    HardLinked { path: PathBuf, links: u64 },
    #[error(
        "transcript {path} is already open in another process (another moonkale-service?); refusing a second writer"
    )]
    Locked { path: PathBuf },
    #[error(
        "transcript {path} is read-only: line {line} is damaged ({reason}); nothing was skipped, a copy is kept at {quarantine}"
    )]
    Corrupt {
        path: PathBuf,
        line: u64,
        reason: String,
        quarantine: PathBuf,
    },
    #[error("a transcript record must be a JSON object")]
    NotAnObject,
    #[error("record of {len} bytes is over the {max}-byte cap")]
    TooLarge { len: usize, max: usize },
    #[error("record would not read back: {0}")]
    Unreadable(String),
    #[error("appending to {path} failed; the record is not stored: {source}")]
    Append {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{0:?} is not a session id (1 to 128 of A-Z a-z 0-9 - _)")]
    BadId(String),
}

fn io_error(what: &'static str, path: &Path) -> impl FnOnce(io::Error) -> TranscriptError {
    let path = path.to_owned();
    move |source| TranscriptError::Io { what, path, source }
}

/// `<chats>/<id>.jsonl`, for an id that cannot name anything else (no
/// separator, no dot, not empty).
pub fn path_for(chats: &Path, id: &str) -> Result<PathBuf, TranscriptError> {
    let ok = (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !ok {
        return Err(TranscriptError::BadId(id.to_owned()));
    }
    Ok(chats.join(format!("{id}.jsonl")))
}

/// The file operations that change a transcript. [`OsIo`] is the real one;
/// tests put a fault-injecting one in its place (security case 55). All
/// three act on the locked transcript, opened `O_APPEND`.
pub trait AppendIo: Send {
    /// One `write` of `line` at the end of the file: the bytes written, which
    /// may be fewer than `line.len()` (the caller treats that as a failure).
    fn write(&mut self, file: &File, line: &[u8]) -> io::Result<usize>;
    /// Makes the file's data and length durable (`fdatasync`).
    fn sync(&mut self, file: &File) -> io::Result<()>;
    /// Cuts the file to `len` bytes.
    fn truncate(&mut self, file: &File, len: u64) -> io::Result<()>;
}

/// The kernel, as is.
pub struct OsIo;

impl AppendIo for OsIo {
    fn write(&mut self, mut file: &File, line: &[u8]) -> io::Result<usize> {
        loop {
            // EINTR means nothing was written; any other outcome is final,
            // because a second write could split the record.
            match file.write(line) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }

    fn sync(&mut self, file: &File) -> io::Result<()> {
        // fdatasync also flushes the length, which is all the metadata an
        // append or a cut changes.
        file.sync_data()
    }

    fn truncate(&mut self, file: &File, len: u64) -> io::Result<()> {
        file.set_len(len)
    }
}

/// What opening did to the end of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// It ended at a line boundary (or was empty, or new).
    Clean,
    /// A torn last record (no `\n`, not a whole JSON object) was cut off.
    CutBack { bytes: u64 },
    /// The last record was a whole JSON object missing its `\n`, now added.
    NewlineAdded,
    /// The transcript is read-only ([`Transcript::read_only`]); its end was
    /// left as found.
    Untouched,
}

/// Why a transcript is read-only.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Corruption {
    /// The first damaged line (1-based).
    pub line: u64,
    pub reason: String,
    /// How many complete lines are damaged.
    pub bad_lines: usize,
    /// The copy made on open.
    pub quarantine: PathBuf,
}

/// One valid record.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub seq: u64,
    pub value: Value,
}

/// A line that is not a JSON object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLine {
    /// 1-based line number.
    pub line: u64,
    /// Byte offset of its first byte.
    pub offset: u64,
    /// Its length without the `\n`.
    pub len: u64,
    pub reason: String,
}

/// Everything in a transcript: the valid records and where the bad lines
/// are, both in file order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Records {
    pub records: Vec<Record>,
    pub bad: Vec<BadLine>,
}

/// An open, locked transcript. Dropping it closes the file, which releases
/// the lock.
pub struct Transcript {
    path: PathBuf,
    file: File,
    io: Box<dyn AppendIo>,
    /// Bytes that are ours: all acknowledged or recovered lines. While
    /// writable it ends at a line boundary.
    len: u64,
    next_seq: u64,
    /// The file may hold bytes past `len` from a failed append that could
    /// not be cut back yet.
    dirty: bool,
    recovery: Recovery,
    corrupt: Option<Corruption>,
}

impl fmt::Debug for Transcript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transcript")
            .field("path", &self.path)
            .field("len", &self.len)
            .field("next_seq", &self.next_seq)
            .field("recovery", &self.recovery)
            .field("corrupt", &self.corrupt)
            .finish_non_exhaustive()
    }
}

impl Transcript {
    /// Opens (creating it and its folder if missing) and recovers the
    /// transcript at `path`.
    pub fn open(path: impl Into<PathBuf>) -> Result<Transcript, TranscriptError> {
        Transcript::open_with(path, Box::new(OsIo))
    }

    /// [`Transcript::open`] with every change to the file going through `io`.
    pub fn open_with(
        path: impl Into<PathBuf>,
        io: Box<dyn AppendIo>,
    ) -> Result<Transcript, TranscriptError> {
        let path = path.into();
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        ensure_dir(&dir).map_err(io_error("creating the folder of", &path))?;
        let (file, created) = open_file(&path)?;
        if created {
            // The new name is durable only once its directory is.
            sync_dir(&dir).map_err(io_error("syncing the folder of", &path))?;
        }
        check_file(&file, &path)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(TranscriptError::Locked { path });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_error("locking", &path)(e)),
        }
        let mut transcript = Transcript {
            path,
            file,
            io,
            len: 0,
            next_seq: 0,
            dirty: false,
            recovery: Recovery::Clean,
            corrupt: None,
        };
        transcript.recover()?;
        Ok(transcript)
    }

    /// Validates every line and repairs the tail, or makes the transcript
    /// read-only if a complete line is damaged.
    fn recover(&mut self) -> Result<(), TranscriptError> {
        let size = self
            .file
            .metadata()
            .map_err(io_error("checking", &self.path))?
            .len();
        let mut lines = 0;
        let mut bad = Vec::new();
        let tail = scan(&self.file, size, |line| {
            lines += 1;
            if let Err(reason) = line.bytes.and_then(check_line) {
                bad.push((line.seq + 1, reason));
            }
        })
        .map_err(io_error("reading", &self.path))?;

        if let Some((line, reason)) = bad.first().cloned() {
            // Damage that a torn append cannot cause: keep every byte, keep a
            // copy, refuse appends (security case 54).
            let quarantine = quarantine(&self.file, size, &self.path)
                .map_err(io_error("quarantining a copy of", &self.path))?;
            tracing::error!(
                path = %self.path.display(),
                line,
                reason,
                bad_lines = bad.len(),
                quarantine = %quarantine.display(),
                "transcript is damaged; it stays read-only"
            );
            self.len = size;
            self.next_seq = lines;
            self.recovery = Recovery::Untouched;
            self.corrupt = Some(Corruption {
                line,
                reason,
                bad_lines: bad.len(),
                quarantine,
            });
            return Ok(());
        }

        self.next_seq = lines;
        let Some(tail) = tail else {
            self.len = size;
            return Ok(());
        };
        if tail.bytes.as_deref().map(check_line) == Some(Ok(())) {
            // The record was written whole; only its newline is missing.
            self.len = size;
            self.dirty = true;
            let written = self
                .io
                .write(&self.file, b"\n")
                .and_then(|n| short_write(n, 1))
                .and_then(|()| self.io.sync(&self.file));
            written.map_err(io_error("adding the missing newline to", &self.path))?;
            self.len = size + 1;
            self.dirty = false;
            self.next_seq += 1;
            self.recovery = Recovery::NewlineAdded;
        } else {
            self.len = tail.offset;
            self.dirty = true;
            self.roll_back()
                .map_err(io_error("cutting a torn last record off", &self.path))?;
            tracing::warn!(
                path = %self.path.display(),
                bytes = tail.len,
                "cut a torn last record off the transcript"
            );
            self.recovery = Recovery::CutBack { bytes: tail.len };
        }
        Ok(())
    }

    /// Appends `record` as one line and returns its sequence number once it
    /// is durable. On any error the record is not stored and the file is
    /// back to its length before the call (or will be cut back by the next
    /// append, if even that failed).
    pub fn append(&mut self, record: &Value) -> Result<u64, TranscriptError> {
        if let Some(c) = &self.corrupt {
            return Err(TranscriptError::Corrupt {
                path: self.path.clone(),
                line: c.line,
                reason: c.reason.clone(),
                quarantine: c.quarantine.clone(),
            });
        }
        if !record.is_object() {
            return Err(TranscriptError::NotAnObject);
        }
        let mut line =
            serde_json::to_vec(record).map_err(|e| TranscriptError::Unreadable(e.to_string()))?;
        if line.len() > MAX_RECORD_BYTES {
            return Err(TranscriptError::TooLarge {
                len: line.len(),
                max: MAX_RECORD_BYTES,
            });
        }
        // The reader's rules (e.g. serde_json's nesting limit) apply to what
        // we write, or we would write a line we later call damaged.
        check_line(&line).map_err(TranscriptError::Unreadable)?;
        line.push(b'\n');

        if self.dirty
            && let Err(e) = self.roll_back()
        {
            return Err(self.append_error(e));
        }
        self.dirty = true;
        let result = self
            .io
            .write(&self.file, &line)
            .and_then(|n| short_write(n, line.len()))
            .and_then(|()| self.io.sync(&self.file));
        if let Err(e) = result {
            if let Err(cut) = self.roll_back() {
                tracing::error!(
                    path = %self.path.display(),
                    error = %cut,
                    "could not cut a failed append back; the next append retries"
                );
            }
            return Err(self.append_error(e));
        }
        self.dirty = false;
        self.len += line.len() as u64;
        let seq = self.next_seq;
        self.next_seq += 1;
        Ok(seq)
    }

    fn append_error(&self, source: io::Error) -> TranscriptError {
        TranscriptError::Append {
            path: self.path.clone(),
            source,
        }
    }

    /// Cuts the file back to `len` and syncs the cut.
    fn roll_back(&mut self) -> io::Result<()> {
        self.io.truncate(&self.file, self.len)?;
        self.io.sync(&self.file)?;
        self.dirty = false;
        Ok(())
    }

    /// Every valid record and the position of every bad line, read from the
    /// file. In a read-only transcript, bytes after the last `\n` are
    /// reported too: as a record if they are a whole object, else as a bad
    /// line.
    pub fn records(&self) -> Result<Records, TranscriptError> {
        let mut out = Records::default();
        let mut take = |seq: u64, offset: u64, len: u64, parsed: Result<Value, String>| match parsed
        {
            Ok(value) => out.records.push(Record { seq, value }),
            Err(reason) => out.bad.push(BadLine {
                line: seq + 1,
                offset,
                len,
                reason,
            }),
        };
        let mut lines = 0;
        let tail = scan(&self.file, self.len, |line| {
            lines += 1;
            take(
                line.seq,
                line.offset,
                line.len,
                line.bytes.and_then(parse_line),
            );
        })
        .map_err(io_error("reading", &self.path))?;
        if let Some(tail) = tail {
            let parsed = tail
                .bytes
                .ok_or_else(|| too_long(tail.len))
                .and_then(|b| parse_line(&b))
                .map_err(|reason| format!("no newline at the end: {reason}"));
            take(lines, tail.offset, tail.len, parsed);
        }
        Ok(out)
    }

    /// Calls `each` with every valid record's position (offset of its first
    /// byte, length without the `\n`) and value, in file order, holding one
    /// record in memory at a time; bad lines are skipped (a read-only
    /// transcript reports them through [`Transcript::records`]).
    pub fn for_each(&self, mut each: impl FnMut(u64, u64, Value)) -> Result<(), TranscriptError> {
        scan(&self.file, self.len, |line| {
            if let Ok(value) = line.bytes.and_then(parse_line) {
                each(line.offset, line.len, value);
            }
        })
        .map_err(io_error("reading", &self.path))?;
        Ok(())
    }

    /// The record stored at `offset` with `len` bytes (as [`for_each`] and
    /// [`Transcript::len`] before an append give them).
    ///
    /// [`for_each`]: Transcript::for_each
    pub fn read_at(&self, offset: u64, len: u64) -> Result<Value, TranscriptError> {
        if len > MAX_RECORD_BYTES as u64 || offset + len > self.len {
            return Err(TranscriptError::Unreadable(format!(
                "no record of {len} bytes at {offset}"
            )));
        }
        let mut bytes = vec![0u8; len as usize];
        self.file
            .read_exact_at(&mut bytes, offset)
            .map_err(io_error("reading", &self.path))?;
        parse_line(&bytes).map_err(TranscriptError::Unreadable)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sequence number the next append will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Length of the stored content, in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What opening did to the end of the file.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// Why appends are refused, if they are.
    pub fn read_only(&self) -> Option<&Corruption> {
        self.corrupt.as_ref()
    }
}

fn short_write(written: usize, wanted: usize) -> io::Result<()> {
    if written == wanted {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("short write: {written} of {wanted} bytes"),
        ))
    }
}

/// Opens `path` read + append, creating it 0600 if missing; never through a
/// symlink, never blocking on a FIFO. Says whether it was created.
fn open_file(path: &Path) -> Result<(File, bool), TranscriptError> {
    let mut options = OpenOptions::new();
    options
        .read(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    let classify = |e: io::Error| {
        if e.raw_os_error() == Some(libc::ELOOP) {
            TranscriptError::Symlink {
                path: path.to_owned(),
            }
        } else {
            io_error("opening", path)(e)
        }
    };
    // O_CREAT | O_EXCL first, to know whether the directory entry is new
    // (and must be synced); it never follows a symlink either.
    match options.clone().create_new(true).open(path) {
        Ok(file) => return Ok((file, true)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(classify(e)),
    }
    options.open(path).map(|f| (f, false)).map_err(classify)
}

/// The opened file must be a regular file of ours with one name; its mode
/// is tightened to 0600 if it was wider.
fn check_file(file: &File, path: &Path) -> Result<(), TranscriptError> {
    let meta = file.metadata().map_err(io_error("checking", path))?;
    let path = path.to_owned();
    if !meta.file_type().is_file() {
        return Err(TranscriptError::NotRegularFile { path });
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    if meta.uid() != unsafe { libc::geteuid() } {
        return Err(TranscriptError::NotOurs { path });
    }
    // A second name could be a hard link to a file outside the workspace
    // (security.md A9); appends would land there.
    if meta.nlink() > 1 {
        return Err(TranscriptError::HardLinked {
            path,
            links: meta.nlink(),
        });
    }
    if meta.mode() & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io_error("making private", &path))?;
    }
    Ok(())
}

/// Creates `dir` (0700) and any missing parents, syncing each parent that
/// gained an entry.
fn ensure_dir(dir: &Path) -> io::Result<()> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => return Ok(()),
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                format!("{} is not a directory", dir.display()),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let parent = match dir.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    ensure_dir(parent)?;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => sync_dir(parent),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Copies `file[..len]` to the first free `<name>.corrupt-<n>` beside `path`,
/// or returns an existing copy with the same bytes (so reopening a damaged
/// transcript does not pile up copies). The copy is written to a temporary
/// name, synced, then hard-linked into place, which never replaces anything
/// and never leaves a half copy under a final name.
fn quarantine(file: &File, len: u64, path: &Path) -> io::Result<PathBuf> {
    let sibling = |suffix: &str| {
        let mut name: OsString = path.file_name().unwrap_or_default().to_owned();
        name.push(suffix);
        path.with_file_name(name)
    };
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    for n in 1..=MAX_QUARANTINE_COPIES {
        let candidate = sibling(&format!(".corrupt-{n}"));
        match same_bytes(file, len, &candidate) {
            Ok(true) => return Ok(candidate),
            Ok(false) => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(_) => continue, // a symlink or something unreadable: not ours
        }
        // Only we write these names (we hold the transcript's lock), so a
        // leftover temporary file is our own from a crash.
        let tmp = sibling(".corrupt-tmp");
        let _ = std::fs::remove_file(&tmp);
        let copied = (|| {
            let mut out = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&tmp)?;
            let copied = io::copy(&mut ReadAt::new(file, len), &mut out)?;
            if copied != len {
                return Err(io::Error::other("the transcript shrank while copying"));
            }
            out.sync_all()?;
            std::fs::hard_link(&tmp, &candidate)
        })();
        let _ = std::fs::remove_file(&tmp);
        match copied {
            Ok(()) => {
                sync_dir(dir)?;
                return Ok(candidate);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other(format!(
        "{MAX_QUARANTINE_COPIES} quarantine copies exist already"
    )))
}

/// Whether the regular file at `other` holds exactly `file[..len]`.
fn same_bytes(file: &File, len: u64, other: &Path) -> io::Result<bool> {
    let other = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(other)?;
    let meta = other.metadata()?;
    if !meta.is_file() || meta.len() != len {
        return Ok(false);
    }
    let mut ours = BufReader::with_capacity(SCAN_BUFFER, ReadAt::new(file, len));
    let mut theirs = BufReader::with_capacity(SCAN_BUFFER, ReadAt::new(&other, len));
    loop {
        let a = ours.fill_buf()?;
        let b = theirs.fill_buf()?;
        let n = a.len().min(b.len());
        if n == 0 {
            return Ok(a.len() == b.len());
        }
        if a[..n] != b[..n] {
            return Ok(false);
        }
        ours.consume(n);
        theirs.consume(n);
    }
}

/// Reads `file[..end]` with positioned reads, so the descriptor's offset
/// is never involved.
struct ReadAt<'a> {
    file: &'a File,
    pos: u64,
    end: u64,
}

impl<'a> ReadAt<'a> {
    fn new(file: &'a File, end: u64) -> ReadAt<'a> {
        ReadAt { file, pos: 0, end }
    }
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = (self.end - self.pos).min(buf.len() as u64) as usize;
        if want == 0 {
            return Ok(0);
        }
        loop {
            match self.file.read_at(&mut buf[..want], self.pos) {
                Ok(n) => {
                    self.pos += n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// One complete line met by [`scan`].
struct Line<'a> {
    seq: u64,
    offset: u64,
    /// Length without the `\n`.
    len: u64,
    /// Its bytes, or why they were not kept.
    bytes: Result<&'a [u8], String>,
}

/// Bytes after the last `\n`.
struct Tail {
    offset: u64,
    len: u64,
    /// `None` if longer than [`MAX_RECORD_BYTES`].
    bytes: Option<Vec<u8>>,
}

fn too_long(len: u64) -> String {
    format!("{len} bytes, over the {MAX_RECORD_BYTES}-byte cap")
}

/// Calls `each` for every complete line of `file[..end]`, holding at most
/// one line (up to the cap) in memory, and returns what follows the last
/// `\n`.
fn scan(file: &File, end: u64, mut each: impl FnMut(Line<'_>)) -> io::Result<Option<Tail>> {
    let mut reader = BufReader::with_capacity(SCAN_BUFFER, ReadAt::new(file, end));
    let mut line = Vec::new();
    let (mut seq, mut offset, mut len) = (0u64, 0u64, 0u64);
    let cap = MAX_RECORD_BYTES as u64;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let newline = buf.iter().position(|&b| b == b'\n');
        let chunk = &buf[..newline.unwrap_or(buf.len())];
        len += chunk.len() as u64;
        if len <= cap {
            line.extend_from_slice(chunk);
        } else {
            line.clear();
        }
        let used = chunk.len() + usize::from(newline.is_some());
        reader.consume(used);
        if newline.is_some() {
            let bytes = if len <= cap {
                Ok(&line[..])
            } else {
                Err(too_long(len))
            };
            each(Line {
                seq,
                offset,
                len,
                bytes,
            });
            seq += 1;
            offset += len + 1;
            len = 0;
            line.clear();
        }
    }
    Ok((len > 0).then(|| Tail {
        offset,
        len,
        bytes: (len <= cap).then_some(line),
    }))
}

/// A line as a record: one JSON object.
fn parse_line(bytes: &[u8]) -> Result<Value, String> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err("not a JSON object".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether [`parse_line`] would accept `bytes`, without building the value:
/// the same parser through `deserialize_any`, so strings are decoded
/// (UTF-8, escapes, surrogates) and numbers and nesting checked exactly as
/// when reading a [`Value`]. A test holds the two to the same verdicts.
fn check_line(bytes: &[u8]) -> Result<(), String> {
    match serde_json::from_slice::<AnyValue>(bytes) {
        Ok(AnyValue { object: true }) => Ok(()),
        Ok(_) => Err("not a JSON object".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// A JSON value, checked and dropped; remembers only whether it was an
/// object.
struct AnyValue {
    object: bool,
}

impl<'de> Deserialize<'de> for AnyValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<AnyValue, D::Error> {
        d.deserialize_any(AnyVisitor)
    }
}

struct AnyVisitor;

impl<'de> Visitor<'de> for AnyVisitor {
    type Value = AnyValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<AnyValue, E> {
        Ok(AnyValue { object: false })
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<AnyValue, E> {
        Ok(AnyValue { object: false })
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<AnyValue, E> {
        Ok(AnyValue { object: false })
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<AnyValue, E> {
        Ok(AnyValue { object: false })
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<AnyValue, E> {
        Ok(AnyValue { object: false })
    }

    fn visit_unit<E: de::Error>(self) -> Result<AnyValue, E> {
        Ok(AnyValue { object: false })
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<AnyValue, A::Error> {
        while seq.next_element::<AnyValue>()?.is_some() {}
        Ok(AnyValue { object: false })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<AnyValue, A::Error> {
        while map.next_entry::<AnyValue, AnyValue>()?.is_some() {}
        Ok(AnyValue { object: true })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use serde_json::json;

    use super::*;

    /// Whether an error is the one a case expects.
    type Expect = fn(&TranscriptError) -> bool;

    fn tempdir() -> tempfile::TempDir {
        tempfile::tempdir().expect("tempdir")
    }

    fn chat(dir: &tempfile::TempDir) -> PathBuf {
        dir.path().join(".moonkale").join("chats").join("s1.jsonl")
    }

    fn write_raw(path: &Path, bytes: &[u8]) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }

    fn line(v: &Value) -> Vec<u8> {
        let mut l = serde_json::to_vec(v).unwrap();
        l.push(b'\n');
        l
    }

    #[test]
    fn creates_private_file_and_folders_and_numbers_records() {
        let dir = tempdir();
        let path = chat(&dir);
        let mut t = Transcript::open(&path).unwrap();
        assert_eq!(t.recovery(), &Recovery::Clean);
        assert!(t.is_empty());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(mode(path.parent().unwrap().parent().unwrap()), 0o700);

        assert_eq!(t.append(&json!({"n": 0})).unwrap(), 0);
        assert_eq!(t.append(&json!({"n": 1, "text": "a\nb 🌙"})).unwrap(), 1);
        drop(t);

        let mut t = Transcript::open(&path).unwrap();
        assert_eq!(t.next_seq(), 2);
        assert_eq!(t.append(&json!({"n": 2})).unwrap(), 2);
        let records = t.records().unwrap();
        assert!(records.bad.is_empty());
        let got: Vec<(u64, Value)> = records
            .records
            .into_iter()
            .map(|r| (r.seq, r.value))
            .collect();
        assert_eq!(
            got,
            vec![
                (0, json!({"n": 0})),
                (1, json!({"n": 1, "text": "a\nb 🌙"})),
                (2, json!({"n": 2})),
            ]
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
    }

    #[test]
    fn existing_file_is_made_private() {
        let dir = tempdir();
        let path = chat(&dir);
        write_raw(&path, b"{\"a\":1}\n");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let _t = Transcript::open(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
    }

    /// Security case 54: hand-made tails, and what opening makes of them.
    #[test]
    fn hostile_54_torn_tails_are_recovered_before_the_next_append() {
        struct Case {
            name: &'static str,
            before: &'static [u8],
            after: &'static [u8],
            recovery: Recovery,
        }
        // Stands for `CutBack` of exactly the bytes that went.
        const CUT: Recovery = Recovery::CutBack { bytes: u64::MAX };
        let a = b"{\"a\":1}\n";
        let cases = [
            Case {
                name: "new empty file",
                before: b"",
                after: b"",
                recovery: Recovery::Clean,
            },
            Case {
                name: "clean end",
                before: a,
                after: a,
                recovery: Recovery::Clean,
            },
            Case {
                name: "partial JSON tail",
                before: b"{\"a\":1}\n{\"b\":[1,",
                after: a,
                recovery: CUT,
            },
            Case {
                name: "tail cut inside a UTF-8 code point",
                before: b"{\"a\":1}\n{\"b\":\"moon \xF0\x9F\x8C",
                after: a,
                recovery: CUT,
            },
            Case {
                name: "tail cut just before the closing brace",
                before: b"{\"a\":1}\n{\"b\":\"}\"",
                after: a,
                recovery: CUT,
            },
            Case {
                name: "complete object missing its newline",
                before: b"{\"a\":1}\n{\"b\":\"\xF0\x9F\x8C\x99\"}",
                after: b"{\"a\":1}\n{\"b\":\"\xF0\x9F\x8C\x99\"}\n",
                recovery: Recovery::NewlineAdded,
            },
            Case {
                name: "no newline anywhere, torn",
                before: b"{\"a\":",
                after: b"",
                recovery: CUT,
            },
            Case {
                name: "no newline anywhere, whole object",
                before: b"{\"a\":1}",
                after: a,
                recovery: Recovery::NewlineAdded,
            },
            Case {
                name: "tail is JSON but not an object",
                before: b"{\"a\":1}\n42",
                after: a,
                recovery: CUT,
            },
            Case {
                name: "tail of zeros (grown file, data not written)",
                before: b"{\"a\":1}\n\0\0\0\0",
                after: a,
                recovery: CUT,
            },
            Case {
                name: "tail of whitespace",
                before: b"{\"a\":1}\n  ",
                after: a,
                recovery: CUT,
            },
        ];
        for case in cases {
            let dir = tempdir();
            let path = chat(&dir);
            write_raw(&path, case.before);
            let mut t = Transcript::open(&path).unwrap();
            let expected = match case.recovery {
                CUT => Recovery::CutBack {
                    bytes: (case.before.len() - case.after.len()) as u64,
                },
                other => other,
            };
            assert_eq!(t.recovery(), &expected, "{}", case.name);
            assert!(t.read_only().is_none(), "{}", case.name);
            assert_eq!(std::fs::read(&path).unwrap(), case.after, "{}", case.name);
            assert_eq!(t.len(), case.after.len() as u64, "{}", case.name);

            // The next record starts on a fresh line and reads back.
            let lines_before = case.after.iter().filter(|&&b| b == b'\n').count() as u64;
            let next = json!({"next": true});
            assert_eq!(t.append(&next).unwrap(), lines_before, "{}", case.name);
            let mut expected = case.after.to_vec();
            expected.extend(line(&next));
            assert_eq!(std::fs::read(&path).unwrap(), expected, "{}", case.name);
            let records = t.records().unwrap();
            assert!(records.bad.is_empty(), "{}: {:?}", case.name, records.bad);
            assert_eq!(records.records.last().unwrap().value, next, "{}", case.name);
        }
    }

    #[test]
    fn tail_longer_than_the_cap_is_cut() {
        let dir = tempdir();
        let path = chat(&dir);
        let mut bytes = b"{\"a\":1}\n{\"b\":\"".to_vec();
        bytes.resize(8 + MAX_RECORD_BYTES + 10, b'x');
        write_raw(&path, &bytes);
        let t = Transcript::open(&path).unwrap();
        assert_eq!(
            t.recovery(),
            &Recovery::CutBack {
                bytes: MAX_RECORD_BYTES as u64 + 10
            }
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\":1}\n");
    }

    /// Security case 54: damage that a torn append cannot cause.
    #[test]
    fn hostile_54_damaged_lines_make_the_transcript_read_only_and_drop_nothing() {
        struct Case {
            name: &'static str,
            bytes: &'static [u8],
            /// Sequence numbers of the valid records.
            valid: &'static [u64],
            /// Line numbers of the bad lines.
            bad: &'static [u64],
        }
        let cases = [
            Case {
                name: "bad line in the middle",
                bytes: b"{\"a\":1}\nnot json\n{\"c\":3}\n{\"d\":4}\n",
                valid: &[0, 2, 3],
                bad: &[2],
            },
            Case {
                name: "torn record glued to the next one",
                bytes: b"{\"a\":1}\n{\"b\":{\"c\":3}\n{\"d\":4}\n",
                valid: &[0, 2],
                bad: &[2],
            },
            Case {
                name: "two records on one line",
                bytes: b"{\"a\":1}{\"b\":2}\n{\"c\":3}\n",
                valid: &[1],
                bad: &[1],
            },
            Case {
                name: "an array, not an object",
                bytes: b"[1]\n{\"c\":3}\n",
                valid: &[1],
                bad: &[1],
            },
            Case {
                name: "invalid UTF-8 inside a string",
                bytes: b"{\"a\":\"\xFF\"}\n{\"c\":3}\n",
                valid: &[1],
                bad: &[1],
            },
            Case {
                name: "lone surrogate escape",
                bytes: b"{\"a\":\"\\ud800\"}\n{\"c\":3}\n",
                valid: &[1],
                bad: &[1],
            },
            Case {
                name: "empty line",
                bytes: b"{\"a\":1}\n\n{\"c\":3}\n",
                valid: &[0, 2],
                bad: &[2],
            },
            Case {
                // A torn append never ends in `\n`, so this is not a torn
                // tail: cutting it could drop an acknowledged record glued
                // behind a torn one.
                name: "bad last complete line",
                bytes: b"{\"a\":1}\n{\"b\":\n",
                valid: &[0],
                bad: &[2],
            },
            Case {
                name: "bad line, later records, then a torn tail (left as found)",
                bytes: b"x\n{\"c\":3}\n{\"d\"",
                valid: &[1],
                bad: &[1, 3],
            },
            Case {
                name: "bad line, later records, then a whole record without newline",
                bytes: b"x\n{\"c\":3}\n{\"d\":4}",
                valid: &[1, 2],
                bad: &[1],
            },
        ];
        for case in cases {
            let dir = tempdir();
            let path = chat(&dir);
            write_raw(&path, case.bytes);
            let mut t = Transcript::open(&path).unwrap();
            let corruption = t.read_only().expect(case.name).clone();
            assert_eq!(corruption.line, case.bad[0], "{}", case.name);
            assert_eq!(t.recovery(), &Recovery::Untouched, "{}", case.name);

            let quarantine = path.with_file_name("s1.jsonl.corrupt-1");
            assert_eq!(corruption.quarantine, quarantine, "{}", case.name);
            assert_eq!(
                std::fs::read(&quarantine).unwrap(),
                case.bytes,
                "{}",
                case.name
            );
            assert_eq!(
                std::fs::metadata(&quarantine).unwrap().mode() & 0o777,
                0o600,
                "{}",
                case.name
            );

            match t.append(&json!({"new": 1})) {
                Err(TranscriptError::Corrupt { line, .. }) => {
                    assert_eq!(line, case.bad[0], "{}", case.name)
                }
                other => panic!("{}: append gave {other:?}", case.name),
            }
            assert_eq!(std::fs::read(&path).unwrap(), case.bytes, "{}", case.name);

            let records = t.records().unwrap();
            let valid: Vec<u64> = records.records.iter().map(|r| r.seq).collect();
            let bad: Vec<u64> = records.bad.iter().map(|b| b.line).collect();
            assert_eq!(valid, case.valid, "{}", case.name);
            assert_eq!(bad, case.bad, "{}: {:?}", case.name, records.bad);
            drop(t);

            // Reopening reuses the identical copy instead of piling up more.
            let t = Transcript::open(&path).unwrap();
            assert_eq!(
                t.read_only().unwrap().quarantine,
                quarantine,
                "{}",
                case.name
            );
            assert!(!path.with_file_name("s1.jsonl.corrupt-2").exists());
            assert!(!path.with_file_name("s1.jsonl.corrupt-tmp").exists());
        }
    }

    #[test]
    fn a_changed_damaged_file_gets_a_new_quarantine_copy() {
        let dir = tempdir();
        let path = chat(&dir);
        write_raw(&path, b"x\n{\"a\":1}\n");
        let first = Transcript::open(&path).unwrap();
        let q1 = first.read_only().unwrap().quarantine.clone();
        drop(first);
        write_raw(&path, b"x\n{\"a\":1}\n{\"b\":2}\n");
        let second = Transcript::open(&path).unwrap();
        let q2 = second.read_only().unwrap().quarantine.clone();
        assert_ne!(q1, q2);
        assert_eq!(std::fs::read(q1).unwrap(), b"x\n{\"a\":1}\n");
        assert_eq!(std::fs::read(q2).unwrap(), b"x\n{\"a\":1}\n{\"b\":2}\n");
    }

    #[test]
    fn damaged_line_over_the_cap_is_reported_not_read() {
        let dir = tempdir();
        let path = chat(&dir);
        let mut bytes = vec![b'x'; MAX_RECORD_BYTES + 1];
        bytes.extend(b"\n{\"a\":1}\n");
        write_raw(&path, &bytes);
        let t = Transcript::open(&path).unwrap();
        assert_eq!(t.read_only().unwrap().line, 1);
        let records = t.records().unwrap();
        assert_eq!(records.records.len(), 1);
        assert_eq!(records.bad[0].len, MAX_RECORD_BYTES as u64 + 1);
        assert!(records.bad[0].reason.contains("cap"), "{:?}", records.bad);
    }

    /// The cheap validator and the real reader agree on every line.
    #[test]
    fn validator_and_reader_agree() {
        let deep = |n: usize| format!("{{\"a\":{}1{}}}", "[".repeat(n), "]".repeat(n));
        let lines: Vec<(Vec<u8>, bool)> = vec![
            (b"{}".to_vec(), true),
            (
                b"{\"a\":[1,2.5,-3,true,false,null,\"s\",{}]}".to_vec(),
                true,
            ),
            (b" {\"a\":1} \r".to_vec(), true),
            (b"{\"a\":1,\"a\":2}".to_vec(), true),
            (b"{\"\\u00e9\\ud83c\\udf19\":\"\\n\"}".to_vec(), true),
            (deep(120).into_bytes(), true),
            (deep(200).into_bytes(), false),
            (b"{\"a\":1e400}".to_vec(), false),
            (b"{\"a\":\"\\ud800\"}".to_vec(), false),
            (b"{\"\xC3\":1}".to_vec(), false),
            (b"{\"a\":01}".to_vec(), false),
            (b"{\"a\":\"\x01\"}".to_vec(), false),
            (b"{a:1}".to_vec(), false),
            (b"{\"a\":1}x".to_vec(), false),
            (b"\"s\"".to_vec(), false),
            (b"null".to_vec(), false),
            (b"".to_vec(), false),
        ];
        for (bytes, valid) in lines {
            let shown = String::from_utf8_lossy(&bytes);
            let checked = check_line(&bytes);
            let parsed = parse_line(&bytes);
            assert_eq!(checked.is_ok(), valid, "check_line({shown}): {checked:?}");
            assert_eq!(parsed.is_ok(), valid, "parse_line({shown}): {parsed:?}");
        }
    }

    #[test]
    fn records_that_would_not_read_back_are_refused() {
        let dir = tempdir();
        let path = chat(&dir);
        let mut t = Transcript::open(&path).unwrap();

        let mut deep = json!(1);
        for _ in 0..200 {
            deep = json!([deep]);
        }
        let big = json!({"pad": "x".repeat(MAX_RECORD_BYTES)});
        let refusals: [(Value, Expect); 4] = [
            (json!([1]), |e| matches!(e, TranscriptError::NotAnObject)),
            (json!("s"), |e| matches!(e, TranscriptError::NotAnObject)),
            (json!({"deep": deep}), |e| {
                matches!(e, TranscriptError::Unreadable(_))
            }),
            (
                big,
                |e| matches!(e, TranscriptError::TooLarge { max, .. } if *max == MAX_RECORD_BYTES),
            ),
        ];
        for (record, expected) in refusals {
            let err = t.append(&record).unwrap_err();
            assert!(expected(&err), "{err:?}");
            assert_eq!(std::fs::read(&path).unwrap(), b"");
        }
        assert_eq!(t.append(&json!({"ok": true})).unwrap(), 0);
    }

    #[test]
    fn a_second_writer_is_refused() {
        let dir = tempdir();
        let path = chat(&dir);
        let mut first = Transcript::open(&path).unwrap();
        first.append(&json!({"n": 0})).unwrap();
        // flock locks belong to an open file description, so a second open
        // in this process stands for a second service instance.
        match Transcript::open(&path) {
            Err(e @ TranscriptError::Locked { .. }) => {
                assert!(e.to_string().contains("another process"), "{e}")
            }
            other => panic!("second writer: {other:?}"),
        }
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"n\":0}\n");
        drop(first);
        let mut second = Transcript::open(&path).unwrap();
        assert_eq!(second.append(&json!({"n": 1})).unwrap(), 1);
    }

    #[test]
    fn refuses_what_is_not_a_plain_file_of_ours() {
        let dir = tempdir();
        let outside = dir.path().join("outside.txt");
        std::fs::write(&outside, b"secret\n").unwrap();
        let chats = dir.path().join("chats");
        std::fs::create_dir(&chats).unwrap();

        let link = chats.join("link.jsonl");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let dangling = chats.join("dangling.jsonl");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
        let hard = chats.join("hard.jsonl");
        std::fs::hard_link(&outside, &hard).unwrap();
        let fifo = chats.join("fifo.jsonl");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: `c` is a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let folder = chats.join("folder.jsonl");
        std::fs::create_dir(&folder).unwrap();

        let cases: [(&Path, Expect); 5] = [
            (&link, |e| matches!(e, TranscriptError::Symlink { .. })),
            (&dangling, |e| matches!(e, TranscriptError::Symlink { .. })),
            (&hard, |e| {
                matches!(e, TranscriptError::HardLinked { links: 2, .. })
            }),
            (&fifo, |e| {
                matches!(e, TranscriptError::NotRegularFile { .. })
            }),
            (&folder, |e| matches!(e, TranscriptError::Io { .. })),
        ];
        for (path, expected) in cases {
            let err = Transcript::open(path).unwrap_err();
            assert!(expected(&err), "{}: {err:?}", path.display());
        }
        assert_eq!(std::fs::read(&outside).unwrap(), b"secret\n");
        assert!(!dir.path().join("nowhere").exists());
    }

    #[test]
    fn path_for_takes_only_plain_ids() {
        let ws = Path::new("/state/chats");
        assert_eq!(
            path_for(ws, "3f2a-b_C9").unwrap(),
            Path::new("/state/chats/3f2a-b_C9.jsonl")
        );
        let long = "a".repeat(129);
        for bad in [
            "",
            "..",
            "a/b",
            "a.b",
            ".x",
            "a b",
            "é",
            "a\0",
            long.as_str(),
        ] {
            assert!(
                matches!(path_for(ws, bad), Err(TranscriptError::BadId(_))),
                "{bad:?}"
            );
        }
    }

    /// Faults for [`Faulty`] to inject, each used once, in order per
    /// operation.
    #[derive(Default)]
    struct Plan {
        write: VecDeque<WriteFault>,
        sync: VecDeque<i32>,
        truncate: VecDeque<i32>,
    }

    #[derive(Clone, Copy, Debug)]
    enum WriteFault {
        /// Writes the first n bytes and reports n.
        Short(usize),
        /// Writes the first n bytes, then fails with the errno.
        FailAfter(usize, i32),
    }

    /// The fault-injecting [`AppendIo`] of security case 55: real file
    /// operations, except where the plan says otherwise.
    struct Faulty(Arc<Mutex<Plan>>);

    impl AppendIo for Faulty {
        fn write(&mut self, file: &File, line: &[u8]) -> io::Result<usize> {
            let fault = self.0.lock().unwrap().write.pop_front();
            match fault {
                None => OsIo.write(file, line),
                Some(WriteFault::Short(n)) => OsIo.write(file, &line[..n]),
                Some(WriteFault::FailAfter(n, errno)) => {
                    assert_eq!(OsIo.write(file, &line[..n])?, n);
                    Err(io::Error::from_raw_os_error(errno))
                }
            }
        }

        fn sync(&mut self, file: &File) -> io::Result<()> {
            match self.0.lock().unwrap().sync.pop_front() {
                None => OsIo.sync(file),
                Some(errno) => Err(io::Error::from_raw_os_error(errno)),
            }
        }

        fn truncate(&mut self, file: &File, len: u64) -> io::Result<()> {
            match self.0.lock().unwrap().truncate.pop_front() {
                None => OsIo.truncate(file, len),
                Some(errno) => Err(io::Error::from_raw_os_error(errno)),
            }
        }
    }

    /// Security case 55: a failed append is not acknowledged, the file goes
    /// back to its length before it, and appends work once the fault is gone.
    #[test]
    fn hostile_55_failed_appends_are_rolled_back() {
        struct Case {
            name: &'static str,
            write: &'static [WriteFault],
            sync: &'static [i32],
            truncate: &'static [i32],
            /// How many appends fail before one succeeds.
            failures: usize,
            /// What the first failure reports.
            errno: Option<i32>,
            /// Whether the file is back to its old length right after the
            /// first failure (else the next append cuts it back first).
            cut_at_once: bool,
        }
        use WriteFault::*;
        let cases = [
            Case {
                name: "short write",
                write: &[Short(5)],
                sync: &[],
                truncate: &[],
                failures: 1,
                errno: None,
                cut_at_once: true,
            },
            Case {
                name: "ENOSPC before any byte",
                write: &[FailAfter(0, libc::ENOSPC)],
                sync: &[],
                truncate: &[],
                failures: 1,
                errno: Some(libc::ENOSPC),
                cut_at_once: true,
            },
            Case {
                name: "ENOSPC after part of the line",
                write: &[FailAfter(7, libc::ENOSPC)],
                sync: &[],
                truncate: &[],
                failures: 1,
                errno: Some(libc::ENOSPC),
                cut_at_once: true,
            },
            Case {
                name: "EIO during the write",
                write: &[FailAfter(3, libc::EIO)],
                sync: &[],
                truncate: &[],
                failures: 1,
                errno: Some(libc::EIO),
                cut_at_once: true,
            },
            Case {
                name: "EIO from fdatasync after a whole write",
                write: &[],
                sync: &[libc::EIO],
                truncate: &[],
                failures: 1,
                errno: Some(libc::EIO),
                cut_at_once: true,
            },
            Case {
                name: "ENOSPC from fdatasync (NFS-style late error)",
                write: &[],
                sync: &[libc::ENOSPC],
                truncate: &[],
                failures: 1,
                errno: Some(libc::ENOSPC),
                cut_at_once: true,
            },
            Case {
                name: "fault persists over three appends",
                write: &[
                    Short(1),
                    FailAfter(0, libc::ENOSPC),
                    FailAfter(2, libc::ENOSPC),
                ],
                sync: &[],
                truncate: &[],
                failures: 3,
                errno: None,
                cut_at_once: true,
            },
            Case {
                name: "the cut back fails too; the next append retries it",
                write: &[],
                sync: &[libc::EIO],
                truncate: &[libc::EIO],
                failures: 1,
                errno: Some(libc::EIO),
                cut_at_once: false,
            },
            Case {
                name: "the cut back is not synced; the next append retries it",
                write: &[Short(4)],
                sync: &[libc::EIO],
                truncate: &[],
                failures: 1,
                errno: None,
                cut_at_once: false,
            },
            Case {
                name: "the retried cut fails as well: that append fails, the next works",
                write: &[Short(4)],
                sync: &[],
                truncate: &[libc::EIO, libc::EIO],
                failures: 2,
                errno: None,
                cut_at_once: false,
            },
        ];
        for case in cases {
            let dir = tempdir();
            let path = chat(&dir);
            let plan = Arc::new(Mutex::new(Plan::default()));
            let mut t = Transcript::open_with(&path, Box::new(Faulty(plan.clone()))).unwrap();
            let first = json!({"n": 0});
            assert_eq!(t.append(&first).unwrap(), 0);
            let before = std::fs::read(&path).unwrap();

            *plan.lock().unwrap() = Plan {
                write: case.write.iter().copied().collect(),
                sync: case.sync.iter().copied().collect(),
                truncate: case.truncate.iter().copied().collect(),
            };
            for attempt in 0..case.failures {
                let err = t
                    .append(&json!({"n": "lost", "pad": "é🌙".repeat(10)}))
                    .unwrap_err();
                let TranscriptError::Append { source, .. } = &err else {
                    panic!("{}: {err:?}", case.name);
                };
                if attempt == 0 {
                    match case.errno {
                        Some(errno) => {
                            assert_eq!(source.raw_os_error(), Some(errno), "{}", case.name)
                        }
                        None => assert_eq!(
                            source.kind(),
                            io::ErrorKind::WriteZero,
                            "{}: {source}",
                            case.name
                        ),
                    }
                    if case.cut_at_once {
                        assert_eq!(std::fs::read(&path).unwrap(), before, "{}", case.name);
                    }
                }
                assert_eq!(t.len(), before.len() as u64, "{}", case.name);
                assert_eq!(t.next_seq(), 1, "{}", case.name);
            }

            let plan_left = plan.lock().unwrap();
            assert!(
                plan_left.write.is_empty()
                    && plan_left.sync.is_empty()
                    && plan_left.truncate.is_empty(),
                "{}: not every fault was met",
                case.name
            );
            drop(plan_left);
            let second = json!({"n": 1});
            assert_eq!(t.append(&second).unwrap(), 1, "{}", case.name);
            let mut expected = before.clone();
            expected.extend(line(&second));
            assert_eq!(std::fs::read(&path).unwrap(), expected, "{}", case.name);
            drop(t);

            let t = Transcript::open(&path).unwrap();
            assert_eq!(t.recovery(), &Recovery::Clean, "{}", case.name);
            let values: Vec<Value> = t
                .records()
                .unwrap()
                .records
                .into_iter()
                .map(|r| r.value)
                .collect();
            assert_eq!(values, vec![first.clone(), second], "{}", case.name);
        }
    }

    #[test]
    fn a_fault_while_recovering_fails_the_open_and_leaves_a_retryable_file() {
        let dir = tempdir();
        let path = chat(&dir);
        write_raw(&path, b"{\"a\":1}\n{\"b\":");
        let plan = Arc::new(Mutex::new(Plan {
            truncate: [libc::EIO].into(),
            ..Plan::default()
        }));
        let err = Transcript::open_with(&path, Box::new(Faulty(plan))).unwrap_err();
        assert!(matches!(err, TranscriptError::Io { .. }), "{err:?}");
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\":1}\n{\"b\":");

        write_raw(&path, b"{\"a\":1}");
        let plan = Arc::new(Mutex::new(Plan {
            write: [WriteFault::FailAfter(0, libc::ENOSPC)].into(),
            ..Plan::default()
        }));
        let err = Transcript::open_with(&path, Box::new(Faulty(plan))).unwrap_err();
        assert!(matches!(err, TranscriptError::Io { .. }), "{err:?}");

        let t = Transcript::open(&path).unwrap();
        assert_eq!(t.recovery(), &Recovery::NewlineAdded);
        assert_eq!(std::fs::read(&path).unwrap(), b"{\"a\":1}\n");
    }
}
