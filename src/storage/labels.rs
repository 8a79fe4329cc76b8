//! Label strings, interned per shard, and the canonical byte form of a label
//! set that the head keys series by.
//!
//! The canonical form is the remote-write 1.0 encoding of the sorted labels
//! (`TimeSeries.labels`: for each label, field 1 holding a `Label` message
//! with `name` = 1 and `value` = 2). Prometheus sends exactly these bytes, so
//! the head can hash a sender's raw label bytes and find the series without
//! decoding, sorting or validating them.

use std::sync::Arc;

use hashbrown::HashTable;

use crate::encoding::{uvarint, uvarint_len};
use xxhash_rust::xxh3::xxh3_64;

/// An interned string's id within one shard.
pub type StrId = u32;

/// One label, owned: what queries hand out. Its strings are shared with
/// the shard that interned them, so handing out a series' labels costs a
/// count per string, not an allocation and a copy.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Label {
    /// Label name.
    pub name: LabelStr,
    /// Label value.
    pub value: LabelStr,
}

/// A label name or value: an immutable, shared string. Clones share the
/// bytes; equal strings from one interner are one allocation, which
/// comparisons notice before they look at the bytes.
#[derive(Clone, Eq)]
pub struct LabelStr(Arc<str>);

impl LabelStr {
    /// The string.
    #[inline]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for LabelStr {
    fn default() -> Self {
        Self::from("")
    }
}

impl std::ops::Deref for LabelStr {
    type Target = str;
    #[inline]
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for LabelStr {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl AsRef<[u8]> for LabelStr {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl std::borrow::Borrow<str> for LabelStr {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq for LabelStr {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl Ord for LabelStr {
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        if Arc::ptr_eq(&self.0, &other.0) {
            return std::cmp::Ordering::Equal;
        }
        self.0.cmp(&other.0)
    }
}

impl PartialOrd for LabelStr {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::hash::Hash for LabelStr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

impl PartialEq<str> for LabelStr {
    fn eq(&self, other: &str) -> bool {
        &*self.0 == other
    }
}

impl PartialEq<&str> for LabelStr {
    fn eq(&self, other: &&str) -> bool {
        &*self.0 == *other
    }
}

impl PartialEq<String> for LabelStr {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<LabelStr> for str {
    fn eq(&self, other: &LabelStr) -> bool {
        self == &*other.0
    }
}

impl PartialEq<LabelStr> for &str {
    fn eq(&self, other: &LabelStr) -> bool {
        *self == &*other.0
    }
}

impl PartialEq<LabelStr> for String {
    fn eq(&self, other: &LabelStr) -> bool {
        **self == *other.0
    }
}

impl PartialOrd<str> for LabelStr {
    fn partial_cmp(&self, other: &str) -> Option<std::cmp::Ordering> {
        Some((*self.0).cmp(other))
    }
}

impl From<&str> for LabelStr {
    fn from(s: &str) -> Self {
        Self(s.into())
    }
}

impl From<&String> for LabelStr {
    fn from(s: &String) -> Self {
        Self(s.as_str().into())
    }
}

impl From<String> for LabelStr {
    fn from(s: String) -> Self {
        Self(s.into())
    }
}

impl From<Box<str>> for LabelStr {
    fn from(s: Box<str>) -> Self {
        Self(s.into())
    }
}

impl From<Arc<str>> for LabelStr {
    fn from(s: Arc<str>) -> Self {
        Self(s)
    }
}

impl From<std::borrow::Cow<'_, str>> for LabelStr {
    fn from(s: std::borrow::Cow<'_, str>) -> Self {
        Self(s.into())
    }
}

impl From<LabelStr> for String {
    fn from(s: LabelStr) -> Self {
        s.0.as_ref().to_owned()
    }
}

impl std::fmt::Display for LabelStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for LabelStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&*self.0, f)
    }
}

impl serde::Serialize for LabelStr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for LabelStr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self::from)
    }
}

/// Stores each distinct string once and hands out small ids.
///
/// The strings are kept in pages of [`PAGE`]: every full page is shared
/// (see [`Interner::pages`]), so that a reader can copy ids under the
/// owner's lock and look the strings up after letting it go.
#[derive(Debug, Default)]
pub struct Interner {
    /// The full pages. Copied when a page fills while a reader holds
    /// them: the copy is of at most `DIR` page handles and one list
    /// handle, and of the list of directories when one fills too (one
    /// handle per `PAGE * DIR` strings), never of the strings.
    full: Arc<Pages>,
    /// The strings after the full pages, fewer than `PAGE`.
    open: Vec<LabelStr>,
    table: HashTable<StrId>,
    bytes: usize,
}

/// Strings an [`Interner`] page holds.
pub const PAGE: usize = 64;

/// Pages a directory of [`Pages`] holds.
const DIR: usize = 64;

/// A full page of interned strings.
type Page = Arc<[LabelStr]>;

/// An interner's full pages: whole directories of `DIR` pages, then the
/// pages after them.
#[derive(Debug, Default, Clone)]
struct Pages {
    dirs: Arc<Vec<Arc<[Page]>>>,
    pages: Vec<Page>,
}

impl Pages {
    /// Pages held.
    fn len(&self) -> usize {
        self.dirs.len() * DIR + self.pages.len()
    }

    #[inline]
    fn page(&self, p: usize) -> Option<&Page> {
        match self.dirs.get(p / DIR) {
            Some(dir) => dir.get(p % DIR),
            None if p / DIR == self.dirs.len() => self.pages.get(p % DIR),
            None => None,
        }
    }

    fn push(&mut self, page: Page) {
        self.pages.push(page);
        if self.pages.len() == DIR {
            let dir: Arc<[Page]> = self.pages.drain(..).collect();
            Arc::make_mut(&mut self.dirs).push(dir);
        }
    }
}

/// An [`Interner`]'s full pages, taken from it: each id it held below
/// [`InternedPages::bound`] is looked up here as it was in the interner
/// at the time, whatever happens to the interner since.
#[derive(Debug, Clone, Default)]
pub struct InternedPages(Arc<Pages>);

impl InternedPages {
    /// Ids below this are in these pages.
    #[inline]
    pub fn bound(&self) -> StrId {
        (self.0.len() * PAGE) as StrId
    }

    /// The shared string behind `id` (empty for one past the pages).
    #[inline]
    pub fn shared(&self, id: StrId) -> LabelStr {
        self.0
            .page(id as usize / PAGE)
            .and_then(|p| p.get(id as usize % PAGE))
            .cloned()
            .unwrap_or_default()
    }

    /// Whether these are the pages `strings` holds now.
    pub fn are_of(&self, strings: &Interner) -> bool {
        Arc::ptr_eq(&self.0, &strings.full)
    }
}

impl Interner {
    /// The id of `s`, storing it if it is new.
    pub fn intern(&mut self, s: &str) -> StrId {
        let hash = xxh3_64(s.as_bytes());
        if let Some(id) = self.find(hash, s) {
            return id;
        }
        let id = (self.full.len() * PAGE + self.open.len()) as StrId;
        self.open.push(s.into());
        if self.open.len() == PAGE {
            let page: Page = self.open.drain(..).collect();
            Arc::make_mut(&mut self.full).push(page);
        }
        // The shared string's two counts beside its bytes.
        self.bytes += s.len() + 2 * std::mem::size_of::<usize>();
        let (full, open) = (&*self.full, &self.open);
        self.table.insert_unique(hash, id, |&id| {
            xxh3_64(string_at(full, open, id).map_or(&[][..], |s| s.as_bytes()))
        });
        id
    }

    fn find(&self, hash: u64, s: &str) -> Option<StrId> {
        self.table
            .find(hash, |&id| {
                string_at(&self.full, &self.open, id).is_some_and(|t| &**t == s)
            })
            .copied()
    }

    /// The id of `s`, if it was ever interned.
    pub fn lookup(&self, s: &str) -> Option<StrId> {
        self.find(xxh3_64(s.as_bytes()), s)
    }

    /// The string behind `id`. Ids come only from this interner.
    #[inline]
    pub fn get(&self, id: StrId) -> &str {
        string_at(&self.full, &self.open, id).map_or("", |s| s)
    }

    /// The shared string behind `id` (empty for an id it never gave).
    #[inline]
    pub fn shared(&self, id: StrId) -> LabelStr {
        string_at(&self.full, &self.open, id)
            .cloned()
            .unwrap_or_default()
    }

    /// The full pages, shared: every id below their
    /// [`InternedPages::bound`] can be looked up in them without this
    /// interner.
    pub fn pages(&self) -> InternedPages {
        InternedPages(Arc::clone(&self.full))
    }

    /// Heap bytes held (string bytes plus table and page slots), roughly.
    pub fn heap_bytes(&self) -> usize {
        // A shared block: its slots and its two counts.
        const PER_PAGE: usize = PAGE * std::mem::size_of::<LabelStr>() + 16;
        const PER_DIR: usize = DIR * std::mem::size_of::<Page>() + 16;
        let slot = std::mem::size_of::<Page>();
        self.bytes
            + self.full.len() * PER_PAGE
            + self.full.dirs.len() * PER_DIR
            + (self.full.dirs.capacity() + self.full.pages.capacity()) * slot
            + self.open.capacity() * std::mem::size_of::<LabelStr>()
            + self.table.capacity() * (std::mem::size_of::<StrId>() + 1)
    }
}

/// The string behind `id` in full pages `full` and then `open`.
#[inline]
fn string_at<'a>(full: &'a Pages, open: &'a [LabelStr], id: StrId) -> Option<&'a LabelStr> {
    let (page, at) = (id as usize / PAGE, id as usize % PAGE);
    match full.page(page) {
        Some(p) => p.get(at),
        None if page == full.len() => open.get(at),
        None => None,
    }
}

/// Which metric and label names are accepted, as Prometheus'
/// `metric_name_validation_scheme`: Prometheus 3 takes any UTF-8 name
/// (`utf8`, its default); `legacy` keeps to the classic grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NameValidation {
    /// Any non-empty UTF-8 name (`{"http.server.duration"}` in PromQL).
    #[default]
    Utf8,
    /// Metric names `[a-zA-Z_:][a-zA-Z0-9_:]*`, label names `[a-zA-Z_][a-zA-Z0-9_]*`.
    Legacy,
}

impl NameValidation {
    /// Whether `s` is an acceptable metric name.
    pub fn metric_name(self, s: &[u8]) -> bool {
        match self {
            Self::Utf8 => !s.is_empty() && std::str::from_utf8(s).is_ok(),
            Self::Legacy => is_valid_metric_name(s),
        }
    }

    /// Whether `s` is an acceptable label name.
    pub fn label_name(self, s: &[u8]) -> bool {
        match self {
            Self::Utf8 => !s.is_empty() && std::str::from_utf8(s).is_ok(),
            Self::Legacy => is_valid_label_name(s),
        }
    }

    /// What an acceptable metric name is, for error messages.
    pub fn metric_rule(self) -> &'static str {
        match self {
            Self::Utf8 => "must be non-empty UTF-8",
            Self::Legacy => "must match [a-zA-Z_:][a-zA-Z0-9_:]*",
        }
    }

    /// What an acceptable label name is, for error messages.
    pub fn label_rule(self) -> &'static str {
        match self {
            Self::Utf8 => "must be non-empty UTF-8",
            Self::Legacy => "must match [a-zA-Z_][a-zA-Z0-9_]*",
        }
    }
}

impl NameValidation {
    /// Every scheme, by name.
    pub const ALL: [NameValidation; 2] = [Self::Utf8, Self::Legacy];

    /// Its name, as flags and files spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Utf8 => "utf8",
            Self::Legacy => "legacy",
        }
    }
}

/// A name that is not a validation scheme.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown name validation scheme {0:?} (utf8 or legacy)")]
pub struct UnknownScheme(String);

impl std::str::FromStr for NameValidation {
    type Err = UnknownScheme;

    fn from_str(s: &str) -> Result<Self, UnknownScheme> {
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| UnknownScheme(s.to_owned()))
    }
}

impl std::fmt::Display for NameValidation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether `s` matches `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub fn is_valid_metric_name(s: &[u8]) -> bool {
    match s.split_first() {
        Some((&c, rest)) => {
            (c.is_ascii_alphabetic() || c == b'_' || c == b':')
                && rest
                    .iter()
                    .all(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
        }
        None => false,
    }
}

/// Whether `s` matches `[a-zA-Z_][a-zA-Z0-9_]*`.
pub fn is_valid_label_name(s: &[u8]) -> bool {
    match s.split_first() {
        Some((&c, rest)) => {
            (c.is_ascii_alphabetic() || c == b'_')
                && rest.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_')
        }
        None => false,
    }
}

/// Appends the canonical bytes of `labels` (already sorted and valid) to `out`.
pub fn encode_canonical<'a>(
    labels: impl IntoIterator<Item = (&'a str, &'a str)>,
    out: &mut Vec<u8>,
) {
    encode_canonical_bytes(
        labels
            .into_iter()
            .map(|(n, v)| (n.as_bytes(), v.as_bytes())),
        out,
    );
}

/// Appends `labels` to `out` in the canonical form, as they are: the bytes
/// equal a series' canonical form only if they are that series' labels,
/// sorted and valid. The canonical form is remote write 1.0's run of
/// `TimeSeries.labels` fields, so a sender's bytes find their series as sent.
#[inline]
pub fn encode_canonical_bytes<'a>(
    labels: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    out: &mut Vec<u8>,
) {
    crate::protocol::remote_write::encode::put_labels(labels, out);
}

/// Splits canonical label bytes (from the WAL or a checkpoint) back into
/// pairs; `None` if they are not well formed.
pub fn decode_canonical(raw: &[u8]) -> Option<Vec<(&str, &str)>> {
    let mut out = Vec::new();
    let mut rest = raw;
    while !rest.is_empty() {
        let (inner, r) = take_field(rest, 0x0a)?;
        rest = r;
        let (name, r) = take_field(inner, 0x0a)?;
        let (value, r) = take_field(r, 0x12)?;
        if !r.is_empty() {
            return None;
        }
        out.push((
            std::str::from_utf8(name).ok()?,
            std::str::from_utf8(value).ok()?,
        ));
    }
    Some(out)
}

/// Splits a length-delimited field with a one-byte `tag` off the front of `b`.
fn take_field(b: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&t, mut b) = b.split_first()?;
    if t != tag {
        return None;
    }
    let (len, n) = uvarint(b)?;
    b = &b[n..];
    let len = usize::try_from(len).ok()?;
    (len <= b.len()).then(|| b.split_at(len))
}

/// Whether `raw` is exactly the canonical encoding of `labels`, compared
/// piece by piece without building the encoding.
pub fn matches_canonical(labels: &[(StrId, StrId)], strings: &Interner, raw: &[u8]) -> bool {
    let mut rest = raw;
    for &(n, v) in labels {
        let (name, value) = (strings.get(n).as_bytes(), strings.get(v).as_bytes());
        let inner = field_len(name.len()) + field_len(value.len());
        let Some(r) = expect_field(rest, 0x0a, inner) else {
            return false;
        };
        let Some(r) = expect_field(r, 0x0a, name.len()) else {
            return false;
        };
        let Some(r) = strip_bytes(r, name) else {
            return false;
        };
        let Some(r) = expect_field(r, 0x12, value.len()) else {
            return false;
        };
        let Some(r) = strip_bytes(r, value) else {
            return false;
        };
        rest = r;
    }
    rest.is_empty()
}

/// Strips `prefix` from the front of `b`. Label names and values are
/// mostly a few bytes long: comparing them eight bytes at a time inline
/// beats a call into the C library's `memcmp` for each.
#[inline]
fn strip_bytes<'a>(b: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    let (head, rest) = b.split_at_checked(prefix.len())?;
    let mut a = head.chunks_exact(8);
    let mut p = prefix.chunks_exact(8);
    let mut diff = 0u64;
    for (x, y) in a.by_ref().zip(p.by_ref()) {
        diff |= u64::from_le_bytes(x.try_into().unwrap_or_default())
            ^ u64::from_le_bytes(y.try_into().unwrap_or_default());
    }
    for (x, y) in a.remainder().iter().zip(p.remainder()) {
        diff |= u64::from(x ^ y);
    }
    (diff == 0).then_some(rest)
}

/// Strips `tag` and the varint `len` from the front of `b`.
#[inline]
fn expect_field(b: &[u8], tag: u8, len: usize) -> Option<&[u8]> {
    let (&t, mut b) = b.split_first()?;
    if t != tag {
        return None;
    }
    let mut v = len as u64;
    loop {
        let (&byte, r) = b.split_first()?;
        b = r;
        if v < 0x80 {
            return (u64::from(byte) == v).then_some(b);
        }
        if byte != (v as u8 | 0x80) {
            return None;
        }
        v >>= 7;
    }
}

/// Bytes of a length-delimited field with a one-byte tag.
fn field_len(len: usize) -> usize {
    1 + uvarint_len(len as u64) + len
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn interned_strings_are_found_in_pages_taken_before_more_came() {
        let mut strings = Interner::default();
        let name = |i: usize| format!("s{i}");
        let mut taken = Vec::new();
        // Past two directories of pages.
        let n = 2 * DIR * PAGE + 5 * PAGE + 7;
        for i in 0..n {
            assert_eq!(strings.intern(&name(i)), i as StrId);
            // Interning again gives the same id.
            assert_eq!(strings.intern(&name(i / 2)), (i / 2) as StrId);
            if i % 613 == 0 || i % (DIR * PAGE) == DIR * PAGE - 1 {
                taken.push((i, strings.pages()));
            }
        }
        for i in 0..n {
            assert_eq!(strings.get(i as StrId), name(i));
            assert_eq!(&*strings.shared(i as StrId), name(i));
            assert_eq!(strings.lookup(&name(i)), Some(i as StrId));
        }
        assert_eq!(strings.lookup("none"), None);
        assert_eq!(strings.get(9999), "");
        let now = strings.pages();
        assert!(now.are_of(&strings));
        assert_eq!(now.bound(), (n / PAGE * PAGE) as StrId);
        for (i, pages) in taken {
            // Full pages only: the ids before the page `i` was in.
            assert_eq!(pages.bound() as usize, (i + 1) / PAGE * PAGE, "{i}");
            assert!(!pages.are_of(&strings) || pages.bound() == now.bound());
            for id in 0..pages.bound() {
                assert_eq!(&*pages.shared(id), name(id as usize));
            }
            assert_eq!(&*pages.shared(pages.bound()), "");
        }
    }

    #[test]
    fn canonical_form_equals_prost_encoding() {
        let long = "x".repeat(300);
        let pairs = [("__name__", "up"), ("instance", long.as_str()), ("job", "")];
        let mut ours = Vec::new();
        encode_canonical(pairs, &mut ours);
        assert_eq!(decode_canonical(&ours).as_deref(), Some(&pairs[..]));
        // Cut anywhere: a cut between labels decodes to the labels before
        // it, any other cut is refused.
        let mut ends = vec![0];
        for i in 1..=pairs.len() {
            let mut b = Vec::new();
            encode_canonical(pairs[..i].iter().copied(), &mut b);
            ends.push(b.len());
        }
        for cut in 0..ours.len() {
            let got = decode_canonical(&ours[..cut]);
            match ends.iter().position(|&e| e == cut) {
                Some(n) => assert_eq!(got.as_deref(), Some(&pairs[..n]), "{cut}"),
                None => assert_eq!(got, None, "{cut}"),
            }
        }
        let ts = crate::proto::prometheus::TimeSeries {
            labels: pairs
                .iter()
                .map(|&(n, v)| crate::proto::prometheus::Label {
                    name: n.into(),
                    value: v.into(),
                })
                .collect(),
            ..Default::default()
        };
        // prost omits the empty value field; our form always writes it.
        let mut theirs = ts.encode_to_vec();
        theirs.truncate(theirs.len() - 7);
        assert_eq!(&ours[..theirs.len()], &theirs[..]);
        assert_eq!(
            &ours[theirs.len()..],
            &[0x0a, 0x07, 0x0a, 0x03, b'j', b'o', b'b', 0x12, 0x00][..]
        );
    }

    #[test]
    fn matches_canonical_checks_every_byte() {
        let mut interner = Interner::default();
        let pairs = [("__name__", "up"), ("job", "node")];
        let ids: Vec<_> = pairs
            .iter()
            .map(|&(n, v)| (interner.intern(n), interner.intern(v)))
            .collect();
        let mut raw = Vec::new();
        encode_canonical(pairs, &mut raw);
        assert!(matches_canonical(&ids, &interner, &raw));
        for i in 0..raw.len() {
            let mut bad = raw.clone();
            bad[i] ^= 1;
            assert!(!matches_canonical(&ids, &interner, &bad), "flip at {i}");
        }
        assert!(!matches_canonical(&ids, &interner, &raw[..raw.len() - 1]));
        assert!(!matches_canonical(&ids[..1], &interner, &raw));
    }

    #[test]
    fn interner_stores_each_string_once() {
        let mut i = Interner::default();
        let a = i.intern("job");
        let b = i.intern("node");
        assert_eq!(i.intern("job"), a);
        assert_ne!(a, b);
        assert_eq!(i.get(b), "node");
        assert_eq!(i.lookup("node"), Some(b));
        assert_eq!(i.lookup("nope"), None);
    }
}
