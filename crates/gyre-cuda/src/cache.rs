//! The on-disk cache of compiled ring kernels.
//!
//! An entry is the image (CUBIN or PTX) of one program, keyed by a hash of everything
//! that decides it: the source (the handler and `ring_kernel.cu`), gyre's device headers,
//! the NVRTC command line (which names the target), and NVRTC's version. The file starts
//! with a text line that repeats the key and the image length, then the image bytes; a
//! file whose line does not match, or that is truncated, is ignored (and overwritten by
//! the next compile). Entries are written to a temporary file in the same directory and
//! renamed into place, so a reader never sees a half-written entry.
//!
//! The directory is `$GYRE_CACHE_DIR`, else `$XDG_CACHE_HOME/gyre`, else
//! `$HOME/.cache/gyre`; with none of them set there is no cache.

use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Environment variable overriding the cache directory.
pub const CACHE_DIR_ENV: &str = "GYRE_CACHE_DIR";

const MAGIC: &str = "gyre-kernel-cache v2";

use crate::nvrtc::Target;
use crate::source::HEADERS;

/// What a compiled program depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheKey {
    /// 128-bit FNV-1a of the source, gyre's headers and the NVRTC command line.
    pub source_hash: u128,
    /// What the image is for.
    pub target: Target,
    /// NVRTC's version `(major, minor)`.
    pub nvrtc: (i32, i32),
}

impl CacheKey {
    /// The key of `source` compiled with `args` for `target` by NVRTC `nvrtc`.
    pub fn new(source: &str, args: &[String], target: Target, nvrtc: (i32, i32)) -> Self {
        let mut h = Fnv128::new();
        h.field(source.as_bytes());
        for (name, text) in HEADERS {
            h.field(name.as_bytes());
            h.field(text.as_bytes());
        }
        for a in args {
            h.field(a.as_bytes());
        }
        Self {
            source_hash: h.0,
            target,
            nvrtc,
        }
    }

    /// The entry's file name: `ring-<hash>-<sm_90|compute_90>-nvrtc<major>.<minor>.<cubin|ptx>`.
    pub fn file_name(&self) -> String {
        let ext = match self.target {
            Target::Cubin(_) => "cubin",
            Target::Ptx(_) => "ptx",
        };
        format!(
            "ring-{:032x}-{}-nvrtc{}.{}.{ext}",
            self.source_hash,
            self.target.name(),
            self.nvrtc.0,
            self.nvrtc.1
        )
    }

    fn header(&self, len: usize) -> String {
        format!("// {MAGIC} {} len={len}\n", self.file_name())
    }
}

/// 128-bit FNV-1a, with each field length-prefixed so that fields cannot run together.
struct Fnv128(u128);

impl Fnv128 {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013b;

    fn new() -> Self {
        Self(Self::OFFSET)
    }

    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 ^= u128::from(x);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }

    fn field(&mut self, b: &[u8]) {
        self.bytes(&(b.len() as u64).to_le_bytes());
        self.bytes(b);
    }
}

/// A directory of cached kernel images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelCache {
    dir: PathBuf,
}

impl KernelCache {
    /// A cache in `dir` (created on the first store).
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The cache of this user (see the module docs), or `None` when no directory is known.
    pub fn from_env() -> Option<Self> {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        var(CACHE_DIR_ENV)
            .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("gyre")))
            .or_else(|| var("HOME").map(|d| d.join(".cache/gyre")))
            .map(Self::at)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of `key`'s entry.
    pub fn path(&self, key: &CacheKey) -> PathBuf {
        self.dir.join(key.file_name())
    }

    /// The cached image of `key`, or `None` when absent or not a valid entry for this key.
    pub fn load(&self, key: &CacheKey) -> Option<Vec<u8>> {
        let path = self.path(key);
        let bytes = std::fs::read(&path).ok()?;
        let parsed = bytes.iter().position(|&b| b == b'\n').and_then(|nl| {
            let (first, image) = (&bytes[..=nl], &bytes[nl + 1..]);
            (first == key.header(image.len()).as_bytes() && !image.is_empty())
                .then(|| image.to_vec())
        });
        if parsed.is_none() {
            tracing::warn!(path = %path.display(), "ignoring a corrupt kernel cache entry");
        }
        parsed
    }

    /// Stores `image` under `key`, atomically (temporary file + rename).
    ///
    /// # Errors
    ///
    /// The file system's error.
    pub fn store(&self, key: &CacheKey, image: &[u8]) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(key);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let tmp = self.dir.join(format!(
            ".{}.tmp.{}.{nanos}",
            key.file_name(),
            std::process::id()
        ));
        let written = (|| {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(key.header(image.len()).as_bytes())?;
            f.write_all(image)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &path)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        Ok(path)
    }

    /// The cached image of `key`, or `compile()`'s, which is then stored (a failure to
    /// store is logged, not returned).
    ///
    /// # Errors
    ///
    /// `compile()`'s error.
    pub fn get_or_compile<E>(
        &self,
        key: &CacheKey,
        compile: impl FnOnce() -> Result<Vec<u8>, E>,
    ) -> Result<Vec<u8>, E> {
        if let Some(image) = self.load(key) {
            tracing::debug!(entry = %key.file_name(), "kernel cache hit");
            return Ok(image);
        }
        let image = compile()?;
        if let Err(e) = self.store(key, &image) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot write the kernel cache");
        }
        Ok(image)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gyre-cache-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn key() -> CacheKey {
        CacheKey::new("src", &["--a".into()], Target::Cubin(90), (12, 8))
    }

    #[test]
    fn key_depends_on_every_input() {
        let k = key();
        assert_eq!(k, key());
        let t = Target::Cubin(90);
        assert_ne!(k, CacheKey::new("src2", &["--a".into()], t, (12, 8)));
        assert_ne!(k, CacheKey::new("src", &["--b".into()], t, (12, 8)));
        assert_ne!(
            k.file_name(),
            CacheKey::new("src", &["--a".into()], Target::Cubin(80), (12, 8)).file_name()
        );
        assert_ne!(
            k.file_name(),
            CacheKey::new("src", &["--a".into()], Target::Ptx(90), (12, 8)).file_name()
        );
        assert_ne!(
            k.file_name(),
            CacheKey::new("src", &["--a".into()], t, (12, 9)).file_name()
        );
        // Fields are length-prefixed: moving a byte between them changes the key.
        assert_ne!(
            CacheKey::new("ab", &["c".into()], t, (12, 8)),
            CacheKey::new("a", &["bc".into()], t, (12, 8))
        );
        assert!(
            k.file_name().ends_with("-sm_90-nvrtc12.8.cubin"),
            "{}",
            k.file_name()
        );
    }

    #[test]
    fn store_then_load_round_trips_and_leaves_no_temp_files() {
        let c = KernelCache::at(tmp_dir("rt"));
        let k = key();
        assert_eq!(c.load(&k), None);
        // Binary (a CUBIN starts with the ELF magic and holds NULs and newlines).
        let image = b"\x7fELF\0\n\x01\xff".to_vec();
        let path = c.store(&k, &image).unwrap();
        assert_eq!(c.load(&k), Some(image));
        let names: Vec<_> = std::fs::read_dir(c.dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(names, vec![path]);
        let _ = std::fs::remove_dir_all(c.dir());
    }

    #[test]
    fn corrupt_entries_are_ignored_and_replaced() {
        let c = KernelCache::at(tmp_dir("corrupt"));
        let k = key();
        c.store(&k, b"full ptx text\n").unwrap();
        let path = c.path(&k);
        let full = std::fs::read(&path).unwrap();
        // Truncated, garbage, wrong key in the header, not UTF-8.
        let other = CacheKey::new("other", &[], Target::Cubin(90), (12, 8)).header(14);
        for bad in [
            full[..full.len() - 3].to_vec(),
            b"garbage".to_vec(),
            format!("{other}full ptx text\n").into_bytes(),
            vec![0xff, 0xfe, b'\n', 0x80],
        ] {
            std::fs::write(&path, &bad).unwrap();
            assert_eq!(c.load(&k), None);
        }
        let mut compiled = 0;
        let ptx = c
            .get_or_compile::<()>(&k, || {
                compiled += 1;
                Ok(b"fresh\n".to_vec())
            })
            .unwrap();
        assert_eq!((ptx.as_slice(), compiled), (&b"fresh\n"[..], 1));
        let again = c.get_or_compile::<()>(&k, || Err(())).unwrap();
        assert_eq!(again, b"fresh\n");
        let _ = std::fs::remove_dir_all(c.dir());
    }

    #[test]
    fn env_override_wins() {
        // Only reads the environment; GYRE_CACHE_DIR is not set by the test harness.
        if let Some(c) = KernelCache::from_env() {
            assert!(!c.dir().as_os_str().is_empty());
        }
    }
}
