//! The route-memory file of a connector ([`crate::ConnectorBuilder::memory_file`]): loaded at
//! build, saved atomically now and then and when the last clone of the connector is dropped.
//!
//! What can go wrong with it, and what happens:
//! - a missing file is a first run;
//! - a file whose bytes do not decode (corrupt, truncated, foreign, oversized) is ignored with a
//!   warning and replaced on the next save;
//! - a path that cannot be used (its directory is missing or cannot be written, it names
//!   something other than a regular file, it cannot be read) fails the build: saving there
//!   would fail every time, and reading a FIFO or a device could block or never end. The file
//!   is opened without blocking and its type checked before a byte is read.
//!
//! Saving never follows a link planted at the temporary name: the temporary file is created
//! with `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600, in the file's own directory, then renamed
//! over the file.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use fastfallback_route::{MAX_FILE_BYTES, RouteDatabase};

use crate::connector::{now, wall_secs};

/// The shortest time between two saves triggered by races.
const SAVE_EVERY: Duration = Duration::from_secs(10);

/// How many temporary names one save tries before giving up (each one already taken, by a
/// crashed earlier save or by someone else, costs one try).
const TEMP_TRIES: u32 = 64;

/// Temporary names handed out in this process; each save takes the next ones.
static TEMP_NAMES: AtomicU64 = AtomicU64::new(0);

/// The route-memory file of a connector.
pub(crate) struct MemoryFile {
    pub(crate) path: PathBuf,
    dirty: AtomicBool,
    last_save: Mutex<Option<std::time::Instant>>,
    /// Held while encoding and writing, so writes never interleave and the last one written
    /// holds the newest memory.
    writing: Mutex<()>,
}

impl MemoryFile {
    /// Loads `path` into `db`. A missing file is a first run, and a file that does not decode
    /// is logged and ignored (it is replaced on the next save). A path that cannot be used is
    /// an error naming it: a directory that is missing or cannot be written, something other
    /// than a regular file, a file that cannot be read.
    pub(crate) fn open(path: PathBuf, db: &RouteDatabase) -> io::Result<Self> {
        let with_path = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
        if let Some(bytes) = read_bounded(&path).map_err(with_path)?
            && let Err(e) = db.decode_into(&bytes, now(), wall_secs())
        {
            tracing::warn!(path = %path.display(), error = %e, "ignoring the route-memory file; it will be replaced");
        }
        probe_directory(&path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("{}: cannot save route memory there: {e}", path.display()),
            )
        })?;
        Ok(Self {
            path,
            dirty: AtomicBool::new(false),
            last_save: Mutex::new(None),
            writing: Mutex::new(()),
        })
    }

    /// Notes that memory changed; saves in the background if the last save is old enough.
    pub(crate) fn changed(file: &std::sync::Arc<Self>, db: &std::sync::Arc<RouteDatabase>) {
        file.dirty.store(true, Ordering::Relaxed);
        let due = {
            let mut last = file.last_save.lock().unwrap_or_else(|p| p.into_inner());
            let now = std::time::Instant::now();
            let due = last.is_none_or(|t| now.duration_since(t) >= SAVE_EVERY);
            if due {
                *last = Some(now);
            }
            due
        };
        if !due || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let (file, db) = (std::sync::Arc::clone(file), std::sync::Arc::clone(db));
        tokio::task::spawn_blocking(move || {
            if let Err(e) = file.save_if_dirty(&db) {
                tracing::warn!(path = %file.path.display(), error = %e, "cannot save route memory");
            }
        });
    }

    /// Writes `db` to the file now.
    pub(crate) fn save(&self, db: &RouteDatabase) -> io::Result<()> {
        let _writing = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        self.dirty.store(false, Ordering::Relaxed);
        let result = write_atomically(&self.path, &db.encode(now(), wall_secs()));
        if result.is_err() {
            self.dirty.store(true, Ordering::Relaxed);
        }
        result
    }

    /// Saves unless nothing changed since the last save. Waits for a save in progress first.
    pub(crate) fn save_if_dirty(&self, db: &RouteDatabase) -> io::Result<()> {
        let writing = self.writing.lock().unwrap_or_else(|p| p.into_inner());
        let dirty = self.dirty.load(Ordering::Relaxed);
        drop(writing);
        if dirty { self.save(db) } else { Ok(()) }
    }
}

/// Opens `path` for reading without blocking (a FIFO would wait for a writer) and refuses
/// anything but a regular file; `None` if it does not exist.
fn open_regular(path: &Path) -> io::Result<Option<std::fs::File>> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(&mut options, libc::O_NONBLOCK);
    let file = match options.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok(Some(file))
}

/// Reads a regular file of at most [`MAX_FILE_BYTES`] (more is read, and fails to decode, as
/// an oversized file); `None` if it does not exist.
fn read_bounded(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let Some(file) = open_regular(path)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)?;
    Ok(Some(bytes))
}

/// The `n`th temporary name for `path`: a hidden file beside it, named after it and this
/// process.
fn temp_name(path: &Path, n: u64) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "memory file has no name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".tmp{}.{n}", std::process::id()));
    Ok(path.with_file_name(tmp_name))
}

/// Creates a new private temporary file beside `path`: never an existing file, never through
/// a link (`O_EXCL | O_NOFOLLOW`), mode 0600. A name already taken moves on to the next.
fn create_temp(path: &Path) -> io::Result<(PathBuf, std::fs::File)> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    let mut last = None;
    for _ in 0..TEMP_TRIES {
        let tmp = temp_name(path, TEMP_NAMES.fetch_add(1, Ordering::Relaxed))?;
        match options.open(&tmp) {
            Ok(file) => {
                // The mode given at creation is reduced by the umask; make it exactly 0600.
                #[cfg(unix)]
                {
                    use std::os::unix::fs::PermissionsExt;
                    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
                }
                return Ok((tmp, file));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!(
            "{TEMP_TRIES} temporary names beside it are taken ({})",
            last.map_or_else(String::new, |e| e.to_string())
        ),
    ))
}

/// Checks that a save to `path` can create its temporary file: the directory exists and can
/// be written. The probe is removed at once.
fn probe_directory(path: &Path) -> io::Result<()> {
    let (tmp, file) = create_temp(path)?;
    drop(file);
    std::fs::remove_file(tmp)
}

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename, so
/// a reader sees the old file or the new one, never half of one. The file is private (0600).
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let (tmp, mut file) = create_temp(path)?;
    let result = (|| {
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};

    /// A fresh directory for one test, removed when dropped.
    struct Dir(PathBuf);

    impl Dir {
        fn new(test: &str) -> Self {
            let dir = std::env::temp_dir().join(format!(
                "fastfallback-memory-file-{test}-{}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_symlink_planted_at_the_temporary_names_is_not_followed_and_the_save_succeeds() {
        let dir = Dir::new("symlink");
        let path = dir.0.join("routes.bin");
        let victim = dir.0.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let missing = dir.0.join("created-through-the-link");
        // Links at the next names this process would use, to a file the process can write and
        // to one that does not exist yet.
        let next = TEMP_NAMES.load(Ordering::Relaxed);
        for n in next..next + 16 {
            let target = if n % 2 == 0 { &victim } else { &missing };
            std::os::unix::fs::symlink(target, temp_name(&path, n).unwrap()).unwrap();
        }
        write_atomically(&path, b"new memory").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!missing.exists(), "nothing was created through a link");
        assert_eq!(std::fs::read(&path).unwrap(), b"new memory");
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn a_fifo_as_the_memory_file_is_refused_without_blocking() {
        let dir = Dir::new("fifo");
        let path = dir.0.join("routes.fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success());
        assert!(std::fs::metadata(&path).unwrap().file_type().is_fifo());
        let db = RouteDatabase::new(Default::default());
        // Before the fix, this open waited for a writer forever.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(MemoryFile::open(path, &db).map(drop));
        });
        let result = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("opening a FIFO returns at once");
        let err = result.unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_path() {
        let dir = Dir::new("missing");
        let path = dir.0.join("no-such-dir").join("routes.bin");
        let db = RouteDatabase::new(Default::default());
        let err = MemoryFile::open(path.clone(), &db).map(drop).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
        assert!(err.to_string().contains("cannot save"), "{err}");
    }
}
