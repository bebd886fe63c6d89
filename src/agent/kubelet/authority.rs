//! The `:authority` rewriter: a small HTTP/2 relay in front of tonic on both kubelet sockets. The
//! kubelet sends its socket path as `:authority`, which h2 refuses (hyperium/h2#487) before tonic
//! sees the call; docs/kubelet-plugin.md says what is rewritten, what never is, and the bounds.
//!
//! Client to server, only header blocks change: decoded with the client's HPACK table, an invalid
//! `:authority` becomes `localhost`, re-encoded as literals (no encoder state towards h2). What it
//! cannot re-encode goes to h2 verbatim with the rest of the connection: it never answers for h2.

use std::borrow::Cow;
use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::debug;

/// The largest frame payload accepted and sent; the tonic server is configured with the same
/// value, so the client (which obeys the server's SETTINGS) never sends more.
pub(super) const MAX_FRAME_SIZE: u32 = 16_384;

/// SETTINGS_MAX_HEADER_LIST_SIZE of the tonic server (hyper's default, set explicitly so the two
/// cannot drift apart). h2 answers a larger list with a stream error of its own.
pub(super) const MAX_HEADER_LIST_SIZE: u32 = 16_384;

/// h2 ends the connection (GOAWAY ENHANCE_YOUR_CALM) when a decoded header list exceeds four
/// times its limit (`MAX_HEADER_LIST_ABUSE_MULTIPLIER` in h2's frame/headers.rs); above this the
/// relay stops collecting and hands the block to h2.
const ABUSE_LIST_SIZE: usize = 4 * MAX_HEADER_LIST_SIZE as usize;

/// h2's limit on CONTINUATION frames without END_HEADERS for 16 KiB lists and frames
/// (`calc_max_continuation_frames` in h2's codec/framed_read.rs: at least 5).
const MAX_CONTINUATIONS: usize = 5;

/// The HPACK dynamic table size the server's decoder allows (SETTINGS_HEADER_TABLE_SIZE, which
/// neither tonic nor our configuration changes from h2's default).
const HEADER_TABLE_SIZE: usize = 4096;

/// What replaces an `:authority` that is not a valid URI authority: what the kubelet's own DRA
/// client sends.
pub const REPLACEMENT_AUTHORITY: &str = "localhost";

const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

const HEADERS: u8 = 0x1;
const PUSH_PROMISE: u8 = 0x5;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// Relays one accepted connection `client` to the gRPC server's end `server` until either side
/// closes. `role` names the socket in log lines.
pub(super) async fn relay<C, S>(client: C, server: S, role: &'static str)
where
    C: AsyncRead + AsyncWrite + Unpin,
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (client_read, mut client_write) = tokio::io::split(client);
    let (mut server_read, mut server_write) = tokio::io::split(server);
    let requests = async {
        let ended = forward_requests(client_read, &mut server_write, role).await;
        // However the client's side ended, h2 must see the end: dropping this half does not
        // close the duplex, and h2 would wait for ever (at shutdown, for its PING's ACK).
        let _ = server_write.shutdown().await;
        ended
    };
    let answers = async {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    tokio::pin!(requests, answers);
    tokio::select! {
        // The server closed the connection: nothing more can be answered.
        () = &mut answers => {}
        // The client stopped sending; let the server finish what it has and close.
        ended = &mut requests => {
            if let Err(error) = ended {
                debug!("{role} socket: connection from the kubelet ended: {error}");
            }
            answers.await;
        }
    }
}

/// Copies the client's frames to the server, rewriting header blocks; see the module docs.
async fn forward_requests<R, W>(mut from: R, mut to: W, role: &'static str) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut preface = [0u8; PREFACE.len()];
    let n = read_full(&mut from, &mut preface).await?;
    to.write_all(&preface[..n]).await?;
    if n < preface.len() {
        return to.shutdown().await;
    }
    if &preface != PREFACE {
        return pass_through(from, to).await;
    }
    let mut rewriter = Rewriter::new(role);
    loop {
        let mut head = [0u8; 9];
        let n = read_full(&mut from, &mut head).await?;
        if n < head.len() {
            to.write_all(&rewriter.abandon()).await?;
            to.write_all(&head[..n]).await?;
            return to.shutdown().await;
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]);
        if len > MAX_FRAME_SIZE {
            // h2 answers with FRAME_SIZE_ERROR; reading the frame would only cost memory.
            to.write_all(&rewriter.abandon()).await?;
            to.write_all(&head).await?;
            return pass_through(from, to).await;
        }
        let mut payload = vec![0u8; len as usize];
        let n = read_full(&mut from, &mut payload).await?;
        if n < payload.len() {
            to.write_all(&rewriter.abandon()).await?;
            to.write_all(&head).await?;
            to.write_all(&payload[..n]).await?;
            return to.shutdown().await;
        }
        match rewriter.frame(head, payload) {
            Step::Send(bytes) => to.write_all(&bytes).await?,
            Step::Hold => {}
            Step::GiveUp(bytes) => {
                to.write_all(&bytes).await?;
                return pass_through(from, to).await;
            }
        }
    }
}

async fn pass_through<R, W>(mut from: R, mut to: W) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    tokio::io::copy(&mut from, &mut to).await?;
    to.shutdown().await
}

/// Reads until `buf` is full or the stream ends; returns how much was read.
async fn read_full<R: AsyncRead + Unpin>(from: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        let n = from.read(&mut buf[filled..]).await?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    Ok(filled)
}

/// What to do with the bytes of one frame.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// Send these bytes to the server.
    Send(Vec<u8>),
    /// Keep the frame: its header block goes on in a CONTINUATION.
    Hold,
    /// Send these bytes (the client's own) and copy the rest of the connection untouched.
    GiveUp(Vec<u8>),
}

/// A header block whose END_HEADERS has not arrived yet.
struct OpenBlock {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
    /// The client's frames as received, for handing them to h2 verbatim.
    original: Vec<u8>,
    continuations: usize,
}

/// The client-to-server state of one connection.
struct Rewriter {
    decoder: loona_hpack::Decoder<'static>,
    open: Option<OpenBlock>,
    role: &'static str,
    /// Whether this connection's replacement was logged (once per connection, at debug).
    logged: bool,
}

impl Rewriter {
    fn new(role: &'static str) -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(HEADER_TABLE_SIZE);
        Self {
            decoder,
            open: None,
            role,
            logged: false,
        }
    }

    /// The client's held frames, for when the connection is handed over as it is.
    fn abandon(&mut self) -> Vec<u8> {
        self.open.take().map(|b| b.original).unwrap_or_default()
    }

    fn frame(&mut self, head: [u8; 9], payload: Vec<u8>) -> Step {
        let kind = head[3];
        let flags = head[4];
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut raw = Vec::with_capacity(head.len() + payload.len());
        raw.extend_from_slice(&head);
        raw.extend_from_slice(&payload);

        if let Some(mut block) = self.open.take() {
            // Only CONTINUATIONs of the same stream may follow (RFC 9113 §6.10).
            if kind != CONTINUATION || stream != block.stream {
                block.original.extend_from_slice(&raw);
                return Step::GiveUp(block.original);
            }
            block.original.extend_from_slice(&raw);
            block.fragment.extend_from_slice(&payload);
            if flags & END_HEADERS == 0 {
                block.continuations += 1;
                if block.continuations > MAX_CONTINUATIONS {
                    return Step::GiveUp(block.original);
                }
                self.open = Some(block);
                return Step::Hold;
            }
            return self.finish(block);
        }

        match kind {
            HEADERS => {
                let Some((priority, fragment)) = split_headers_payload(flags, &payload) else {
                    return Step::GiveUp(raw);
                };
                if stream == 0 {
                    return Step::GiveUp(raw);
                }
                let block = OpenBlock {
                    stream,
                    end_stream: flags & END_STREAM != 0,
                    priority,
                    fragment: fragment.to_vec(),
                    original: raw,
                    continuations: 0,
                };
                if flags & END_HEADERS != 0 {
                    self.finish(block)
                } else {
                    self.open = Some(block);
                    Step::Hold
                }
            }
            // A client must never send PUSH_PROMISE, and a CONTINUATION here follows nothing:
            // both are connection errors for h2.
            CONTINUATION | PUSH_PROMISE => Step::GiveUp(raw),
            _ => Step::Send(raw),
        }
    }

    /// Decodes a complete block and re-encodes it with the `:authority` fixed.
    fn finish(&mut self, block: OpenBlock) -> Step {
        let Some(never_indexed) = representations(&block.fragment) else {
            return Step::GiveUp(block.original);
        };
        let mut encoded = Vec::with_capacity(block.fragment.len() * 2);
        let mut list_size = 0usize;
        let mut too_large = false;
        let mut field = 0;
        let mut replaced: Option<Vec<u8>> = None;
        let decoded = self.decoder.decode_with_cb(&block.fragment, |name, value| {
            // RFC 7541 §4.1 sizes, as h2 counts them.
            list_size += name.len() + value.len() + 32;
            let sensitive = never_indexed.get(field).copied().unwrap_or(false);
            field += 1;
            if too_large || list_size > ABUSE_LIST_SIZE {
                too_large = true;
                return;
            }
            let value: Cow<[u8]> = if &*name == b":authority" && !valid_authority(&value) {
                replaced = Some(value.into_owned());
                Cow::Borrowed(REPLACEMENT_AUTHORITY.as_bytes())
            } else {
                value
            };
            literal(&mut encoded, sensitive, &name, &value);
        });
        let decoded = match decoded {
            Ok(()) => true,
            // A block of nothing but a table size update is valid HPACK; the decoder has applied
            // the update and merely refuses to end on it.
            Err(loona_hpack::decoder::DecoderError::SizeUpdateAtEnd) => never_indexed.is_empty(),
            Err(_) => false,
        };
        if !decoded || too_large || field != never_indexed.len() {
            return Step::GiveUp(block.original);
        }
        if let Some(value) = replaced
            && !self.logged
        {
            self.logged = true;
            debug!(
                "{} socket: replaced :authority {:?} with {REPLACEMENT_AUTHORITY:?} (h2 refuses it)",
                self.role,
                String::from_utf8_lossy(&value)
            );
        }
        Step::Send(frames(
            block.stream,
            block.end_stream,
            block.priority,
            &encoded,
        ))
    }
}

/// Whether h2 accepts `value` as `:authority`: the same parser h2 applies.
fn valid_authority(value: &[u8]) -> bool {
    http::uri::Authority::try_from(value).is_ok()
}

/// The PRIORITY fields and the header block fragment of a HEADERS payload, without padding;
/// `None` when the padding or priority fields do not fit (a protocol error for h2).
fn split_headers_payload(flags: u8, payload: &[u8]) -> Option<(Option<[u8; 5]>, &[u8])> {
    let mut rest = payload;
    let mut pad = 0usize;
    if flags & PADDED != 0 {
        let (&len, after) = rest.split_first()?;
        pad = len as usize;
        rest = after;
    }
    let mut priority = None;
    if flags & PRIORITY != 0 {
        if rest.len() < 5 {
            return None;
        }
        priority = Some(rest[..5].try_into().ok()?);
        rest = &rest[5..];
    }
    if pad > rest.len() {
        return None;
    }
    Some((priority, &rest[..rest.len() - pad]))
}

/// Walks a header block's representations (RFC 7541 §6) without decoding strings: for each
/// field, whether it is "never indexed". `None` for a block that is not well formed, including a
/// table size update after a field (§4.2: only at the start of a block).
fn representations(block: &[u8]) -> Option<Vec<bool>> {
    let mut fields = Vec::new();
    let mut at = 0;
    while at < block.len() {
        let first = block[at];
        if first & 0x80 != 0 {
            at += integer_len(&block[at..], 7)?;
            fields.push(false);
        } else if first & 0xc0 == 0x40 {
            at = literal_end(block, at, 6)?;
            fields.push(false);
        } else if first & 0xe0 == 0x20 {
            if !fields.is_empty() {
                return None;
            }
            at += integer_len(&block[at..], 5)?;
        } else {
            at = literal_end(block, at, 4)?;
            fields.push(first & 0x10 != 0);
        }
    }
    Some(fields)
}

/// Where the literal field starting at `at` (with a `prefix`-bit name index) ends.
fn literal_end(block: &[u8], at: usize, prefix: u32) -> Option<usize> {
    let (index, len) = integer(&block[at..], prefix)?;
    let mut at = at + len;
    if index == 0 {
        at = string_end(block, at)?;
    }
    string_end(block, at)
}

fn string_end(block: &[u8], at: usize) -> Option<usize> {
    let (len, used) = integer(block.get(at..)?, 7)?;
    let end = at.checked_add(used)?.checked_add(len)?;
    (end <= block.len()).then_some(end)
}

fn integer_len(buf: &[u8], prefix: u32) -> Option<usize> {
    integer(buf, prefix).map(|(_, len)| len)
}

/// An HPACK integer (RFC 7541 §5.1): its value and how many bytes it took. Values beyond what
/// a 16 KiB frame could use are refused rather than overflowing.
fn integer(buf: &[u8], prefix: u32) -> Option<(usize, usize)> {
    let max = (1usize << prefix) - 1;
    let value = (*buf.first()? as usize) & max;
    if value < max {
        return Some((value, 1));
    }
    let mut value = max;
    for (i, &byte) in buf.iter().enumerate().skip(1).take(4) {
        value += ((byte & 0x7f) as usize) << (7 * (i - 1));
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// Appends a literal field that stays out of the dynamic table: "never indexed" when the client
/// sent it so, "without indexing" otherwise; new name, no Huffman coding.
fn literal(out: &mut Vec<u8>, never_indexed: bool, name: &[u8], value: &[u8]) {
    out.push(if never_indexed { 0x10 } else { 0x00 });
    for s in [name, value] {
        put_integer(out, 7, 0x00, s.len());
        out.extend_from_slice(s);
    }
}

fn put_integer(out: &mut Vec<u8>, prefix: u32, pattern: u8, value: usize) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(pattern | value as u8);
        return;
    }
    out.push(pattern | max as u8);
    let mut rest = value - max;
    while rest >= 0x80 {
        out.push((rest & 0x7f) as u8 | 0x80);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// A HEADERS frame and as many CONTINUATIONs as `block` needs at [`MAX_FRAME_SIZE`].
fn frames(stream: u32, end_stream: bool, priority: Option<[u8; 5]>, block: &[u8]) -> Vec<u8> {
    let max = MAX_FRAME_SIZE as usize;
    let mut out = Vec::with_capacity(block.len() + 9 * (block.len() / max + 2) + 5);
    let first_room = max - priority.map_or(0, |p| p.len());
    let (first, mut rest) = block.split_at(block.len().min(first_room));
    let mut flags = 0;
    if end_stream {
        flags |= END_STREAM;
    }
    if priority.is_some() {
        flags |= PRIORITY;
    }
    if rest.is_empty() {
        flags |= END_HEADERS;
    }
    let mut payload = Vec::with_capacity(first.len() + 5);
    if let Some(p) = priority {
        payload.extend_from_slice(&p);
    }
    payload.extend_from_slice(first);
    frame_head(&mut out, HEADERS, flags, stream, payload.len());
    out.extend_from_slice(&payload);
    while !rest.is_empty() {
        let (chunk, after) = rest.split_at(rest.len().min(max));
        rest = after;
        let flags = if rest.is_empty() { END_HEADERS } else { 0 };
        frame_head(&mut out, CONTINUATION, flags, stream, chunk.len());
        out.extend_from_slice(chunk);
    }
    out
}

fn frame_head(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, len: usize) {
    let len = u32::try_from(len).expect("frames are cut at 16 KiB");
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame as bytes.
    fn raw_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> ([u8; 9], Vec<u8>) {
        let mut head = Vec::new();
        frame_head(&mut head, kind, flags, stream, payload.len());
        (head.try_into().unwrap(), payload.to_vec())
    }

    /// An HPACK literal with incremental indexing and a new name, no Huffman.
    fn indexed_literal(name: &str, value: &str) -> Vec<u8> {
        let mut out = vec![0x40];
        for s in [name, value] {
            put_integer(&mut out, 7, 0, s.len());
            out.extend_from_slice(s.as_bytes());
        }
        out
    }

    /// Parses `bytes` into frames: (type, flags, stream, payload).
    fn parse(mut bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
        let mut frames = Vec::new();
        while !bytes.is_empty() {
            let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
            let stream = u32::from_be_bytes(bytes[5..9].try_into().unwrap());
            frames.push((bytes[3], bytes[4], stream, bytes[9..9 + len].to_vec()));
            bytes = &bytes[9 + len..];
        }
        frames
    }

    /// Decodes the re-encoded block of `bytes` (HEADERS + CONTINUATIONs) with a fresh decoder:
    /// it must not need the dynamic table.
    fn decode_sent(bytes: &[u8]) -> Vec<(String, String)> {
        let mut block = Vec::new();
        for (kind, flags, _, payload) in parse(bytes) {
            let fragment = if kind == HEADERS && flags & PRIORITY != 0 {
                &payload[5..]
            } else {
                &payload[..]
            };
            block.extend_from_slice(fragment);
        }
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_table_size(0);
        decoder
            .decode(&block)
            .unwrap()
            .into_iter()
            .map(|(n, v)| (String::from_utf8(n).unwrap(), String::from_utf8(v).unwrap()))
            .collect()
    }

    fn request(authority: &str) -> Vec<u8> {
        let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
        block.extend(indexed_literal(
            ":path",
            "/pluginregistration.Registration/GetInfo",
        ));
        block.extend(indexed_literal(":authority", authority));
        block.extend(indexed_literal("te", "trailers"));
        block
    }

    fn sent(step: Step) -> Vec<u8> {
        match step {
            Step::Send(bytes) => bytes,
            other => panic!("expected bytes to send, got {other:?}"),
        }
    }

    #[test]
    fn an_invalid_authority_is_replaced_and_nothing_else_changes() {
        let mut rewriter = Rewriter::new("test");
        let path = "%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Fmedia.liken.sh-reg.sock";
        let (head, payload) = raw_frame(HEADERS, END_HEADERS, 1, &request(path));
        let out = sent(rewriter.frame(head, payload));
        let frames = parse(&out);
        assert_eq!(frames.len(), 1);
        assert_eq!(
            (frames[0].0, frames[0].1, frames[0].2),
            (HEADERS, END_HEADERS, 1)
        );
        assert_eq!(
            decode_sent(&out),
            [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", "/pluginregistration.Registration/GetInfo"),
                (":authority", "localhost"),
                ("te", "trailers"),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );

        // The second call refers to the first call's entries in the client's dynamic table
        // (62 = newest: te, 63 = :authority, 64 = :path): the relay resolves them.
        let (head, payload) = raw_frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            3,
            &[0x83, 0x86, 0xc0, 0xbf, 0xbe],
        );
        let out = sent(rewriter.frame(head, payload));
        assert_eq!(parse(&out)[0].1, END_HEADERS | END_STREAM);
        let fields = decode_sent(&out);
        assert_eq!(fields[2].1, "/pluginregistration.Registration/GetInfo");
        assert_eq!(fields[3], (":authority".to_owned(), "localhost".to_owned()));
        assert_eq!(fields[4], ("te".to_owned(), "trailers".to_owned()));
    }

    #[test]
    fn a_valid_or_absent_authority_is_kept() {
        for authority in ["localhost", "kubelet-plugin.invalid:80", "[::1]:8080"] {
            let mut rewriter = Rewriter::new("test");
            let (head, payload) = raw_frame(HEADERS, END_HEADERS, 1, &request(authority));
            let fields = decode_sent(&sent(rewriter.frame(head, payload)));
            assert_eq!(fields[3].1, authority);
        }
        for authority in ["/var/lib/kubelet/x.sock", "%2Fvar", "", "a b"] {
            let mut rewriter = Rewriter::new("test");
            let (head, payload) = raw_frame(HEADERS, END_HEADERS, 1, &request(authority));
            let fields = decode_sent(&sent(rewriter.frame(head, payload)));
            assert_eq!(fields[3].1, "localhost", "{authority:?}");
        }
        let mut rewriter = Rewriter::new("test");
        let (head, payload) = raw_frame(HEADERS, END_HEADERS, 1, &[0x83, 0x86, 0x84]);
        let fields = decode_sent(&sent(rewriter.frame(head, payload)));
        assert!(fields.iter().all(|(n, _)| n != ":authority"), "{fields:?}");
    }

    #[test]
    fn huffman_coded_fields_are_decoded() {
        // RFC 7541 C.4.1: :method GET, :scheme http, :path /, :authority www.example.com (Huffman).
        let block = [
            0x82, 0x86, 0x84, 0x41, 0x8c, 0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab,
            0x90, 0xf4, 0xff,
        ];
        let mut rewriter = Rewriter::new("test");
        let (head, payload) = raw_frame(HEADERS, END_HEADERS, 1, &block);
        let fields = decode_sent(&sent(rewriter.frame(head, payload)));
        assert_eq!(
            fields[3],
            (":authority".to_owned(), "www.example.com".to_owned())
        );
    }

    #[test]
    fn padding_priority_and_continuations_are_handled() {
        let mut rewriter = Rewriter::new("test");
        let block = request("/raw/path.sock");
        let (first, second) = block.split_at(7);
        let mut payload = vec![3]; // pad length
        payload.extend_from_slice(&[0x80, 0, 0, 0x05, 200]); // exclusive, depends on 5, weight 200
        payload.extend_from_slice(first);
        payload.extend_from_slice(&[0, 0, 0]);
        let (head, payload) = raw_frame(HEADERS, PADDED | PRIORITY | END_STREAM, 7, &payload);
        assert_eq!(rewriter.frame(head, payload), Step::Hold);
        let (head, payload) = raw_frame(CONTINUATION, END_HEADERS, 7, second);
        let out = sent(rewriter.frame(head, payload));
        let frames = parse(&out);
        assert_eq!(frames.len(), 1);
        let (kind, flags, stream, payload) = &frames[0];
        assert_eq!(
            (*kind, *flags, *stream),
            (HEADERS, PRIORITY | END_STREAM | END_HEADERS, 7)
        );
        assert_eq!(payload[..5], [0x80, 0, 0, 0x05, 200], "priority kept");
        assert_eq!(decode_sent(&out)[3].1, "localhost");
        // Frames of other types pass untouched.
        let (head, payload) = raw_frame(0x0, END_STREAM, 7, b"\0\0\0\0\x02hi");
        let mut whole = head.to_vec();
        whole.extend_from_slice(&payload);
        assert_eq!(rewriter.frame(head, payload), Step::Send(whole));
    }

    #[test]
    fn a_block_larger_than_a_frame_is_cut_into_continuations() {
        let mut rewriter = Rewriter::new("test");
        let mut block = request("%2Fsock");
        for i in 0..6 {
            block.extend(indexed_literal(&format!("x-big-{i}"), &"v".repeat(3000)));
        }
        let (head, payload) = raw_frame(HEADERS, END_HEADERS, 1, &block);
        let out = sent(rewriter.frame(head, payload));
        let frames = parse(&out);
        assert_eq!(frames.len(), 2, "18 KiB of fields in two frames");
        assert_eq!(frames[0].0, HEADERS);
        assert_eq!(frames[0].1 & END_HEADERS, 0);
        assert_eq!(frames[0].3.len(), MAX_FRAME_SIZE as usize);
        assert_eq!((frames[1].0, frames[1].1), (CONTINUATION, END_HEADERS));
        let fields = decode_sent(&out);
        assert_eq!(fields.len(), 11);
        assert_eq!(fields[3].1, "localhost");
        assert_eq!(fields[10].1.len(), 3000);
    }

    #[test]
    fn never_indexed_fields_stay_never_indexed() {
        let mut block = request("%2Fsock");
        // Literal never indexed, new name: "authorization: secret".
        block.push(0x10);
        for s in ["authorization", "secret"] {
            put_integer(&mut block, 7, 0, s.len());
            block.extend_from_slice(s.as_bytes());
        }
        assert_eq!(
            representations(&block),
            Some(vec![false, false, false, false, false, true])
        );
        let mut rewriter = Rewriter::new("test");
        let (head, payload) = raw_frame(HEADERS, END_HEADERS, 1, &block);
        let out = sent(rewriter.frame(head, payload));
        let block = &parse(&out)[0].3;
        assert_eq!(
            representations(block),
            Some(vec![false, false, false, false, false, true])
        );
        // Every field is a literal with a new name that stays out of the dynamic table.
        let mut at = 0;
        while at < block.len() {
            assert!(
                matches!(block[at], 0x00 | 0x10),
                "field at {at}: {:#x}",
                block[at]
            );
            at = literal_end(block, at, 4).unwrap();
        }
    }

    #[test]
    fn what_cannot_be_rewritten_goes_to_h2_verbatim() {
        let whole = |head: [u8; 9], payload: &[u8]| [&head[..], payload].concat();
        // A reference to a dynamic entry the client never made: an HPACK error.
        let mut rewriter = Rewriter::new("test");
        let (head, payload) = raw_frame(HEADERS, END_HEADERS, 1, &[0x83, 0xff, 0x10]);
        assert_eq!(
            rewriter.frame(head, payload.clone()),
            Step::GiveUp(whole(head, &payload))
        );
        // A table size update after a field (RFC 7541 §4.2).
        let mut rewriter = Rewriter::new("test");
        let (head, payload) = raw_frame(HEADERS, END_HEADERS, 1, &[0x83, 0x20, 0x86]);
        assert!(matches!(rewriter.frame(head, payload), Step::GiveUp(_)));
        // A table larger than the server allows.
        let mut rewriter = Rewriter::new("test");
        let (head, payload) = raw_frame(HEADERS, END_HEADERS, 1, &[0x3f, 0xe1, 0x3f, 0x83]);
        assert!(matches!(rewriter.frame(head, payload), Step::GiveUp(_)));
        // Padding longer than the frame.
        let mut rewriter = Rewriter::new("test");
        let (head, payload) = raw_frame(HEADERS, END_HEADERS | PADDED, 1, &[9, 0x83]);
        assert!(matches!(rewriter.frame(head, payload), Step::GiveUp(_)));
        // A CONTINUATION that continues nothing; a DATA frame inside a header block.
        let mut rewriter = Rewriter::new("test");
        let (head, payload) = raw_frame(CONTINUATION, END_HEADERS, 1, &[0x83]);
        assert!(matches!(rewriter.frame(head, payload), Step::GiveUp(_)));
        let mut rewriter = Rewriter::new("test");
        let (h1, p1) = raw_frame(HEADERS, 0, 1, &[0x83]);
        assert_eq!(rewriter.frame(h1, p1.clone()), Step::Hold);
        let (h2, p2) = raw_frame(0x0, 0, 1, b"x");
        assert_eq!(
            rewriter.frame(h2, p2.clone()),
            Step::GiveUp([whole(h1, &p1), whole(h2, &p2)].concat())
        );
    }

    #[test]
    fn a_continuation_flood_and_a_huge_list_are_cut_off() {
        // One CONTINUATION more than h2 tolerates: everything held goes to h2, which refuses.
        let mut rewriter = Rewriter::new("test");
        let (head, payload) = raw_frame(HEADERS, 0, 1, &[0x83]);
        assert_eq!(rewriter.frame(head, payload), Step::Hold);
        for _ in 0..MAX_CONTINUATIONS {
            let (head, payload) = raw_frame(CONTINUATION, 0, 1, &[0x86]);
            assert_eq!(rewriter.frame(head, payload), Step::Hold);
        }
        let (head, payload) = raw_frame(CONTINUATION, 0, 1, &[0x86]);
        match rewriter.frame(head, payload) {
            Step::GiveUp(bytes) => assert_eq!(parse(&bytes).len(), MAX_CONTINUATIONS + 2),
            other => panic!("{other:?}"),
        }

        // 4 KiB in the dynamic table, referred to 17 times: 68 KiB decoded from ~4 KiB sent.
        let mut rewriter = Rewriter::new("test");
        let mut block = indexed_literal("x-big", &"v".repeat(4000));
        block.extend(std::iter::repeat_n(0xbe, 16)); // index 62: the entry just added
        let (head, payload) = raw_frame(HEADERS, END_HEADERS, 1, &block);
        assert!(matches!(rewriter.frame(head, payload), Step::GiveUp(_)));
    }

    #[tokio::test]
    async fn the_relay_copies_both_ways_and_rewrites_on_the_way_in() {
        let (client, client_end) = tokio::io::duplex(1 << 16);
        let (server, server_end) = tokio::io::duplex(1 << 16);
        let relay = tokio::spawn(relay(client_end, server_end, "test"));
        let (mut client_read, mut client_write) = tokio::io::split(client);
        let (mut server_read, mut server_write) = tokio::io::split(server);

        let mut sent = PREFACE.to_vec();
        let settings = [0u8, 0, 0, 0x4, 0, 0, 0, 0, 0];
        sent.extend_from_slice(&settings);
        let mut headers = Vec::new();
        frame_head(&mut headers, HEADERS, END_HEADERS, 1, request("%2Fx").len());
        headers.extend(request("%2Fx"));
        sent.extend_from_slice(&headers);
        client_write.write_all(&sent).await.unwrap();
        client_write.shutdown().await.unwrap();

        let mut received = Vec::new();
        server_read.read_to_end(&mut received).await.unwrap();
        assert_eq!(&received[..24], PREFACE);
        assert_eq!(&received[24..33], settings, "SETTINGS untouched");
        assert_eq!(decode_sent(&received[33..])[3].1, "localhost");

        server_write.write_all(b"answer bytes").await.unwrap();
        server_write.shutdown().await.unwrap();
        let mut answer = Vec::new();
        client_read.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"answer bytes");
        relay.await.unwrap();
    }

    /// A client connection that fails (here: reset on the first read, as a kubelet that went away
    /// with our answer unread is seen) must end the server's stream too; otherwise h2 waits for
    /// that client for ever, and at shutdown the agent with it.
    #[tokio::test]
    async fn a_reset_client_ends_the_servers_stream() {
        struct Reset;
        impl AsyncRead for Reset {
            fn poll_read(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                _: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<io::Result<()>> {
                std::task::Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()))
            }
        }
        impl AsyncWrite for Reset {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<io::Result<usize>> {
                std::task::Poll::Ready(Ok(buf.len()))
            }
            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<io::Result<()>> {
                std::task::Poll::Ready(Ok(()))
            }
            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                _: &mut std::task::Context<'_>,
            ) -> std::task::Poll<io::Result<()>> {
                std::task::Poll::Ready(Ok(()))
            }
        }
        let (mut server, server_end) = tokio::io::duplex(1 << 16);
        let relay = tokio::spawn(relay(Reset, server_end, "test"));
        let mut received = Vec::new();
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            server.read_to_end(&mut received),
        )
        .await
        .expect("the server's stream ends")
        .unwrap();
        assert!(received.is_empty());
        // The server closes its end in turn, and the relay is done.
        drop(server);
        relay.await.unwrap();
    }
}
