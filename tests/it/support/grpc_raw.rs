//! A raw HTTP/2 gRPC client that plays the kubelet byte for byte: tonic's client always sends an
//! `:authority` built from a valid URI, while kubelets send the socket path percent-encoded, the
//! raw path, `localhost` or none. It follows grpc-go's client transport (`http2_client.go`): its
//! preface, SETTINGS, header order and `grpc-timeout`, HPACK encoded as Go's `hpack.Encoder` does
//! (incremental indexing, Huffman where shorter), one DATA frame per unary call.
//!
//! Kept only for what the kubelet's own code (support/kubelet_real.rs) cannot send: the other
//! `:authority` forms, HPACK table turnover, h2's resets and abusive header blocks.

use std::collections::VecDeque;
use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// The user agent of the grpc-go release Kubernetes 1.34 builds with.
pub const USER_AGENT: &str = "grpc-go/1.72.1";

/// HTTP/2 frame types and flags (RFC 9113 §6).
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const ACK: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// The `:authority` forms real clients send over a unix socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Authority {
    /// The kubelet's registration client (grpc-go ≥ 1.58 dialing a bare path):
    /// `%2Fvar%2Flib%2Fkubelet%2Fplugins_registry%2Fmedia.liken.sh-reg.sock`; and the DRA client
    /// of kubelets 1.32 and 1.33 (`grpc.Dial` of the endpoint path).
    PercentEncodedPath,
    /// Older grpc-go (Debian's 1.33): the path as it is.
    RawPath,
    /// The DRA client of kubelets 1.34 and later (`grpc.NewClient("unix://...")`), and the
    /// registration client of kubelets that set it.
    Localhost,
    /// No `:authority` at all (allowed by RFC 9113 §8.3.1).
    Absent,
}

impl Authority {
    /// Every form, for tests that try each.
    pub const ALL: [Authority; 4] = [
        Authority::PercentEncodedPath,
        Authority::RawPath,
        Authority::Localhost,
        Authority::Absent,
    ];

    /// The value sent for a call on the socket at `socket`.
    pub fn value(self, socket: &Path) -> Option<String> {
        let path = socket.to_str().expect("socket paths in tests are UTF-8");
        match self {
            Authority::PercentEncodedPath => Some(encode_authority(path)),
            Authority::RawPath => Some(path.to_owned()),
            Authority::Localhost => Some("localhost".to_owned()),
            Authority::Absent => None,
        }
    }
}

/// grpc-go's `encodeAuthority` (clientconn.go): every byte outside RFC 3986's unreserved
/// characters, sub-delims and `:[]@` becomes `%XX`, upper-case hex.
pub fn encode_authority(authority: &str) -> String {
    let keep = |c: u8| c.is_ascii_alphanumeric() || b"-_.~!$&'()*+,;=:[]@".contains(&c);
    let mut out = String::with_capacity(authority.len());
    for &c in authority.as_bytes() {
        if keep(c) {
            out.push(c as char);
        } else {
            out.push_str(&format!("%{c:02X}"));
        }
    }
    out
}

/// grpc-go's `EncodeDuration` (internal/grpcutil/encode_duration.go): the finest unit whose
/// count fits in 8 digits.
pub fn encode_timeout(timeout: Duration) -> String {
    const MAX: u128 = 99_999_999;
    let nanos = timeout.as_nanos();
    let units: [(u128, char); 6] = [
        (1, 'n'),
        (1_000, 'u'),
        (1_000_000, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
        (3_600_000_000_000, 'H'),
    ];
    for (size, unit) in units {
        // grpc-go rounds up so that the server never sees a shorter deadline.
        let count = nanos.div_ceil(size);
        if count <= MAX {
            return format!("{count}{unit}");
        }
    }
    format!("{MAX}H")
}

/// How a call ended when it did not end with a gRPC reply.
#[derive(Debug, PartialEq, Eq)]
pub enum CallError {
    /// The server reset the stream (RST_STREAM) with this error code; 1 is PROTOCOL_ERROR.
    Reset(u32),
    /// The server closed the connection with GOAWAY and this error code.
    GoAway(u32),
    /// The connection ended before the stream did.
    Closed,
    /// No answer within the deadline.
    Timeout,
    /// The answer ended with a grpc-status other than 0.
    Status(u32, String),
    /// The answer was not a well-formed gRPC reply.
    Malformed(String),
}

/// A complete answer: response headers, the message (without the 5-byte gRPC prefix), trailers.
#[derive(Debug, Default)]
pub struct Answer {
    pub headers: Vec<(String, String)>,
    pub message: Vec<u8>,
    pub trailers: Vec<(String, String)>,
}

impl Answer {
    /// The value of `name` in the trailers (or, for a trailers-only answer, the headers).
    pub fn trailer(&self, name: &str) -> Option<&str> {
        self.trailers
            .iter()
            .chain(&self.headers)
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The entries of HPACK's static table (RFC 7541 appendix A) that a gRPC request can match.
const STATIC: &[(usize, &str, &str)] = &[
    (1, ":authority", ""),
    (2, ":method", "GET"),
    (3, ":method", "POST"),
    (4, ":path", "/"),
    (5, ":path", "/index.html"),
    (6, ":scheme", "http"),
    (7, ":scheme", "https"),
    (31, "content-type", ""),
    (58, "user-agent", ""),
];

/// The size of HPACK's static table: dynamic entries are numbered after it.
const STATIC_LEN: usize = 61;

/// The encoder side of one connection, as Go's `hpack.Encoder` with its default 4096-byte table.
pub struct GoEncoder {
    /// Newest first, as HPACK numbers them.
    dynamic: VecDeque<(String, String)>,
    size: usize,
}

impl GoEncoder {
    const MAX_SIZE: usize = 4096;

    pub fn new() -> Self {
        Self {
            dynamic: VecDeque::new(),
            size: 0,
        }
    }

    /// (index, whether name and value both match), as Go's `searchTable`.
    fn search(&self, name: &str, value: &str) -> (usize, bool) {
        let mut by_name = 0;
        for &(index, n, v) in STATIC {
            if n == name {
                if v == value {
                    return (index, true);
                }
                if by_name == 0 {
                    by_name = index;
                }
            }
        }
        let mut dynamic_name = 0;
        for (i, (n, v)) in self.dynamic.iter().enumerate() {
            if n == name {
                if v == value {
                    return (STATIC_LEN + i + 1, true);
                }
                if dynamic_name == 0 {
                    dynamic_name = STATIC_LEN + i + 1;
                }
            }
        }
        if by_name == 0 && dynamic_name != 0 {
            return (dynamic_name, false);
        }
        (by_name, false)
    }

    /// The header block of one call, in grpc-go's order.
    pub fn request(&mut self, authority: Option<&str>, method: &str, timeout: Duration) -> Vec<u8> {
        let mut block = Vec::new();
        let e = self;
        e.field(&mut block, ":method", "POST");
        e.field(&mut block, ":scheme", "http");
        e.field(&mut block, ":path", method);
        if let Some(authority) = authority {
            e.field(&mut block, ":authority", authority);
        }
        e.field(&mut block, "content-type", "application/grpc");
        e.field(&mut block, "user-agent", USER_AGENT);
        e.field(&mut block, "te", "trailers");
        e.field(&mut block, "grpc-timeout", &encode_timeout(timeout));
        block
    }

    fn add(&mut self, name: &str, value: &str) {
        let entry = name.len() + value.len() + 32;
        while self.size + entry > Self::MAX_SIZE {
            let (n, v) = self.dynamic.pop_back().expect("table holds what it counts");
            self.size -= n.len() + v.len() + 32;
        }
        self.dynamic.push_front((name.to_owned(), value.to_owned()));
        self.size += entry;
    }

    /// Appends one field the way Go's `WriteField` does.
    pub fn field(&mut self, block: &mut Vec<u8>, name: &str, value: &str) {
        let (index, both) = self.search(name, value);
        if both {
            integer(block, 7, 0x80, index);
            return;
        }
        // Go indexes every field that fits in the table (nothing the kubelet sends is sensitive).
        let indexing = name.len() + value.len() + 32 <= Self::MAX_SIZE;
        let (prefix_bits, pattern) = if indexing { (6, 0x40) } else { (4, 0x00) };
        integer(block, prefix_bits, pattern, index);
        if index == 0 {
            string(block, name);
        }
        string(block, value);
        if indexing {
            self.add(name, value);
        }
    }
}

/// An HPACK integer with an `n`-bit prefix after the representation's `pattern` bits.
fn integer(out: &mut Vec<u8>, n: u32, pattern: u8, value: usize) {
    let max = (1usize << n) - 1;
    if value < max {
        out.push(pattern | value as u8);
        return;
    }
    out.push(pattern | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

/// An HPACK string literal, Huffman-coded when that is shorter (as Go's `appendHpackString`).
fn string(out: &mut Vec<u8>, s: &str) {
    let mut huffman = Vec::new();
    httlib_huffman::encode(s.as_bytes(), &mut huffman).expect("every byte has a Huffman code");
    if huffman.len() < s.len() {
        integer(out, 7, 0x80, huffman.len());
        out.extend_from_slice(&huffman);
    } else {
        integer(out, 7, 0x00, s.len());
        out.extend_from_slice(s.as_bytes());
    }
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// One HTTP/2 connection to a unix socket, as grpc-go opens it.
pub struct RawGrpc {
    io: UnixStream,
    encoder: GoEncoder,
    decoder: loona_hpack::Decoder<'static>,
    next_stream: u32,
    /// Bytes read but not yet parsed into frames.
    pending: Vec<u8>,
}

impl RawGrpc {
    /// Connects and sends the preface and grpc-go's (empty) SETTINGS frame.
    pub async fn connect(path: &Path) -> std::io::Result<RawGrpc> {
        let mut io = UnixStream::connect(path).await?;
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        frame(&mut hello, SETTINGS, 0, 0, &[]);
        io.write_all(&hello).await?;
        Ok(RawGrpc {
            io,
            encoder: GoEncoder::new(),
            decoder: loona_hpack::Decoder::new(),
            next_stream: 1,
            pending: Vec::new(),
        })
    }

    /// The header block grpc-go sends for a call of `method` (`/package.Service/Method`).
    pub fn request_headers(
        &mut self,
        authority: Option<&str>,
        method: &str,
        timeout: Duration,
    ) -> Vec<u8> {
        self.encoder.request(authority, method, timeout)
    }

    /// One unary call; `Ok` only for grpc-status 0.
    pub async fn call(
        &mut self,
        authority: Option<&str>,
        method: &str,
        message: &[u8],
        timeout: Duration,
    ) -> Result<Answer, CallError> {
        let block = self.request_headers(authority, method, timeout);
        self.call_with_block(&block, message, timeout).await
    }

    /// One unary call with a header block given as bytes (for tests of odd encodings).
    pub async fn call_with_block(
        &mut self,
        block: &[u8],
        message: &[u8],
        timeout: Duration,
    ) -> Result<Answer, CallError> {
        let stream = self.next_stream;
        self.next_stream += 2;
        let mut out = Vec::new();
        frame(&mut out, HEADERS, END_HEADERS, stream, block);
        let mut body = Vec::with_capacity(5 + message.len());
        body.push(0); // not compressed
        body.extend_from_slice(&(message.len() as u32).to_be_bytes());
        body.extend_from_slice(message);
        frame(&mut out, DATA, END_STREAM, stream, &body);
        self.io
            .write_all(&out)
            .await
            .map_err(|_| CallError::Closed)?;
        match tokio::time::timeout(timeout, self.read_answer(stream)).await {
            Ok(answer) => answer,
            Err(_) => Err(CallError::Timeout),
        }
    }

    /// Sends raw bytes (frames a test builds itself).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.io.write_all(bytes).await
    }

    /// Sends an ACK. A server that has already closed the connection cannot take it, but what
    /// it sent before closing (a GOAWAY, typically) is still queued here, so the answer is read
    /// on: giving up at the failed write would make the outcome depend on which of the server's
    /// frames the write raced with.
    async fn acknowledge(&mut self, ack: &[u8]) {
        let _ = self.io.write_all(ack).await;
    }

    /// Reads frames until `stream` ends, answering SETTINGS and PING on the way.
    pub async fn read_answer(&mut self, stream: u32) -> Result<Answer, CallError> {
        let mut answer = Answer::default();
        let mut blocks = 0;
        let mut block = Vec::new();
        let mut data = Vec::new();
        loop {
            let (kind, flags, id, payload) = self.read_frame().await?;
            match kind {
                SETTINGS if flags & ACK == 0 => {
                    let mut ack = Vec::new();
                    frame(&mut ack, SETTINGS, ACK, 0, &[]);
                    self.acknowledge(&ack).await;
                }
                PING if flags & ACK == 0 => {
                    let mut pong = Vec::new();
                    frame(&mut pong, PING, ACK, 0, &payload);
                    self.acknowledge(&pong).await;
                }
                GOAWAY => {
                    let code = u32::from_be_bytes(payload[4..8].try_into().expect("8 bytes"));
                    return Err(CallError::GoAway(code));
                }
                RST_STREAM if id == stream => {
                    let code = u32::from_be_bytes(payload[..4].try_into().expect("4 bytes"));
                    return Err(CallError::Reset(code));
                }
                HEADERS | CONTINUATION if id == stream => {
                    let mut fragment = &payload[..];
                    if kind == HEADERS {
                        if flags & PADDED != 0 {
                            let pad = fragment[0] as usize;
                            fragment = &fragment[1..fragment.len() - pad];
                        }
                        if flags & PRIORITY != 0 {
                            fragment = &fragment[5..];
                        }
                    }
                    block.extend_from_slice(fragment);
                    if flags & END_HEADERS != 0 {
                        let fields = self
                            .decoder
                            .decode(&block)
                            .map_err(|e| CallError::Malformed(format!("hpack: {e}")))?;
                        let fields = fields
                            .into_iter()
                            .map(|(n, v)| {
                                (
                                    String::from_utf8_lossy(&n).into_owned(),
                                    String::from_utf8_lossy(&v).into_owned(),
                                )
                            })
                            .collect();
                        if blocks == 0 {
                            answer.headers = fields;
                        } else {
                            answer.trailers = fields;
                        }
                        blocks += 1;
                        block.clear();
                    }
                    if flags & END_STREAM != 0 {
                        return finish(answer, &data);
                    }
                }
                DATA if id == stream => {
                    data.extend_from_slice(&payload);
                    if flags & END_STREAM != 0 {
                        return finish(answer, &data);
                    }
                }
                _ => {}
            }
        }
    }

    async fn read_frame(&mut self) -> Result<(u8, u8, u32, Vec<u8>), CallError> {
        loop {
            if self.pending.len() >= 9 {
                let len = u32::from_be_bytes([0, self.pending[0], self.pending[1], self.pending[2]])
                    as usize;
                if self.pending.len() >= 9 + len {
                    let kind = self.pending[3];
                    let flags = self.pending[4];
                    let id = u32::from_be_bytes(self.pending[5..9].try_into().expect("4 bytes"))
                        & 0x7fff_ffff;
                    let payload = self.pending[9..9 + len].to_vec();
                    self.pending.drain(..9 + len);
                    return Ok((kind, flags, id, payload));
                }
            }
            let mut chunk = [0u8; 16384];
            let n = self
                .io
                .read(&mut chunk)
                .await
                .map_err(|_| CallError::Closed)?;
            if n == 0 {
                return Err(CallError::Closed);
            }
            self.pending.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Checks `:status`, grpc-status and the 5-byte message prefix.
fn finish(mut answer: Answer, data: &[u8]) -> Result<Answer, CallError> {
    let status = answer.headers.iter().find(|(n, _)| n == ":status");
    if status.map(|(_, v)| v.as_str()) != Some("200") {
        return Err(CallError::Malformed(format!(
            "HTTP status {status:?}, headers {:?}",
            answer.headers
        )));
    }
    let code = answer
        .trailer("grpc-status")
        .ok_or_else(|| CallError::Malformed(format!("no grpc-status in {answer:?}")))?
        .parse::<u32>()
        .map_err(|e| CallError::Malformed(format!("grpc-status: {e}")))?;
    if code != 0 {
        let message = answer.trailer("grpc-message").unwrap_or("").to_owned();
        return Err(CallError::Status(code, message));
    }
    if data.len() < 5 || data[0] != 0 {
        return Err(CallError::Malformed(format!("gRPC message frame {data:?}")));
    }
    let len = u32::from_be_bytes(data[1..5].try_into().expect("4 bytes")) as usize;
    if data.len() != 5 + len {
        return Err(CallError::Malformed(format!(
            "gRPC message of {len} bytes in {} bytes of DATA",
            data.len()
        )));
    }
    answer.message = data[5..].to_vec();
    Ok(answer)
}

/// One unary call of `method` with a protobuf `request`, decoding the protobuf reply.
pub async fn unary<Req: prost::Message, Resp: prost::Message + Default>(
    conn: &mut RawGrpc,
    authority: Option<&str>,
    method: &str,
    request: &Req,
) -> Result<Resp, CallError> {
    let answer = conn
        .call(
            authority,
            method,
            &request.encode_to_vec(),
            Duration::from_secs(10),
        )
        .await?;
    Resp::decode(&answer.message[..]).map_err(|e| CallError::Malformed(format!("protobuf: {e}")))
}
