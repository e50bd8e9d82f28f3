// A client of the Larder protocol (Protocol.md) for browsers, over the console's WebSocket: one Larder frame per
// binary message. Plain ES module: no build step, no dependencies. zlib (RFC 1950) through the browser's
// CompressionStream("deflate") and DecompressionStream("deflate").

export const Opcode = Object.freeze({
  HELLO: 0x0001, PING: 0x0002,
  CREATE: 0x0010, GET: 0x0011, GET_MANY: 0x0012, REPLACE: 0x0013, PATCH: 0x0014, DELETE: 0x0015, LIST: 0x0016,
  SEARCH: 0x0017, COUNT: 0x0018, GROUP: 0x0019,
  COLLECTIONS: 0x0020, DROP_COLLECTION: 0x0021, INDEX: 0x0022, SCHEMA_SET: 0x0023, SCHEMA_GET: 0x0024,
  BLOB_PUT: 0x0030, BLOB_GET: 0x0031, BLOB_HEAD: 0x0032, BLOB_DELETE: 0x0033, BLOB_LIST: 0x0034,
  BLOB_UPLOAD: 0x0035, BLOB_UPLOAD_CHUNK: 0x0036, BLOB_UPLOAD_STATUS: 0x0037, BLOB_UPLOAD_FINISH: 0x0038,
  BLOB_UPLOAD_ABORT: 0x0039,
  RULES_GET: 0x0026, SIGN_IN: 0x0028, SIGN_OUT: 0x0029,
  STATS: 0x0040, WATCH: 0x0050, UNWATCH: 0x0051, EVENT: 0x0052,
});

export const Flags = Object.freeze({ COMPRESSED: 0x01, BINARY: 0x02, RESPONSE: 0x04, PUSH: 0x08 });

export const MAGIC = 0x4c52;
export const HEADER_SIZE = 24;
export const PREFIX_SIZE = 28;

/** A frame the protocol forbids (Protocol.md section 2): the connection cannot go on. */
export class FrameError extends Error {}

/** An error answer: its status code and name, message and details (Protocol.md section 5.5). */
export class LarderError extends Error {
  constructor(status, body) {
    super(body?.message ?? `status ${status}`);
    this.status = status;
    this.name = body?.name ?? "ERROR";
    this.details = body?.details ?? {};
    this.body = body;
  }
}

const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/** The bytes of a frame: `json` (bytes, already compressed when `flags` says so) and an optional binary part. */
export function encodeFrame({ opcode, requestID, status = 0, flags = 0, json = new Uint8Array(0),
                              binary = new Uint8Array(0), uncompressedLength = 0 }) {
  if (binary.length > 0) flags |= Flags.BINARY;
  const length = HEADER_SIZE + json.length + binary.length;
  const bytes = new Uint8Array(4 + length);
  const view = new DataView(bytes.buffer);
  view.setUint32(0, length);
  view.setUint16(4, MAGIC);
  view.setUint8(6, 1);
  view.setUint8(7, flags);
  view.setUint16(8, opcode);
  view.setUint16(10, status);
  view.setUint32(12, requestID);
  view.setUint32(16, json.length);
  view.setUint32(20, binary.length);
  view.setUint32(24, uncompressedLength);
  bytes.set(json, PREFIX_SIZE);
  bytes.set(binary, PREFIX_SIZE + json.length);
  return bytes;
}

/** Decodes exactly one frame from `bytes`, checking the rules of Protocol.md section 2 (the JSON part as sent). */
export function decodeFrame(bytes, limits = { maxFrameBytes: 2 ** 31, maxJSONBytes: 2 ** 31, maxBlobBytes: 2 ** 31 }) {
  if (!(bytes instanceof Uint8Array)) bytes = new Uint8Array(bytes);
  if (bytes.length < PREFIX_SIZE) throw new FrameError(`a frame of ${bytes.length} bytes is shorter than its header`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const h = {
    length: view.getUint32(0), magic: view.getUint16(4), version: view.getUint8(6), flags: view.getUint8(7),
    opcode: view.getUint16(8), status: view.getUint16(10), requestID: view.getUint32(12),
    jsonLength: view.getUint32(16), binaryLength: view.getUint32(20), uncompressedLength: view.getUint32(24),
  };
  if (h.magic !== MAGIC) throw new FrameError("bad magic: not a Larder frame");
  if (h.version !== 1) throw new FrameError(`frame version ${h.version} is not supported`);
  if (h.length > limits.maxFrameBytes) throw new FrameError(`frame of ${h.length} bytes exceeds the limit`);
  if (h.flags & 0xf0) throw new FrameError("reserved flag bits are set");
  if (h.length !== HEADER_SIZE + h.jsonLength + h.binaryLength) throw new FrameError("frame length mismatch");
  if (((h.flags & Flags.BINARY) !== 0) !== (h.binaryLength > 0)) throw new FrameError("binary flag disagrees");
  const compressed = (h.flags & Flags.COMPRESSED) !== 0;
  if (!compressed && h.uncompressedLength !== 0) throw new FrameError("uncompressedLength on an uncompressed part");
  if (compressed && (h.jsonLength === 0 || h.uncompressedLength === 0)) throw new FrameError("empty compressed part");
  if (h.jsonLength > limits.maxJSONBytes || h.uncompressedLength > limits.maxJSONBytes) {
    throw new FrameError("JSON part exceeds the limit");
  }
  if (h.binaryLength > limits.maxBlobBytes) throw new FrameError("binary part exceeds the limit");
  if (bytes.length !== 4 + h.length) throw new FrameError("bytes after the frame, or the frame is cut short");
  h.json = bytes.subarray(PREFIX_SIZE, PREFIX_SIZE + h.jsonLength);
  h.binary = bytes.subarray(PREFIX_SIZE + h.jsonLength);
  return h;
}

async function transform(bytes, stream) {
  const piped = new Blob([bytes]).stream().pipeThrough(stream);
  return new Uint8Array(await new Response(piped).arrayBuffer());
}

/** zlib (RFC 1950) compression. */
export function deflate(bytes) { return transform(bytes, new CompressionStream("deflate")); }

/** zlib inflation into at most `limit` bytes: a stream that wants more is an error, not a bigger buffer. */
export async function inflate(bytes, limit) {
  const reader = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate")).getReader();
  const parts = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    total += value.length;
    if (total > limit) {
      await reader.cancel();
      throw new FrameError(`the JSON part inflates past its declared ${limit} bytes`);
    }
    parts.push(value);
  }
  const out = new Uint8Array(total);
  let offset = 0;
  for (const part of parts) { out.set(part, offset); offset += part.length; }
  return out;
}

/** The JSON object of a decoded frame, inflated when compressed (`{}` for an empty part). */
export async function frameJSON(frame) {
  let json = frame.json;
  if (frame.flags & Flags.COMPRESSED) {
    json = await inflate(json, frame.uncompressedLength);
    if (json.length !== frame.uncompressedLength) throw new FrameError("the JSON part inflates to another length");
  }
  return json.length === 0 ? {} : JSON.parse(decoder.decode(json));
}

/**
 * One connection to a Larder server through the console's WebSocket.
 *
 *   const larder = await Larder.connect(`ws://${location.host}/ws`, { token });
 *   const record = await larder.request(Opcode.GET, { collection: "notes", id });
 */
export class Larder {
  constructor(socket) {
    this.socket = socket;
    this.nextID = 1;
    this.pending = new Map();
    this.compression = "none";
    this.threshold = 1024;
    this.hello = null;
    this.onEvent = null;
    this.onClose = null;
    this.closed = null;
    socket.binaryType = "arraybuffer";
    socket.addEventListener("message", (event) => this.#received(new Uint8Array(event.data)));
    socket.addEventListener("close", (event) => this.#ended(event));
  }

  /**
   * Opens the WebSocket and sends HELLO with at most one credential: a role `token`, a user's `idToken`, or the
   * `session` of an account the server keeps; rejects with the server's error (a wrong one: UNAUTHENTICATED).
   */
  static async connect(url, { token, idToken, session, client = "larder-console" } = {}) {
    const socket = new WebSocket(url);
    await new Promise((resolve, reject) => {
      socket.addEventListener("open", resolve, { once: true });
      socket.addEventListener("error", () => reject(new Error(`cannot open ${url}`)), { once: true });
    });
    const larder = new Larder(socket);
    const hello = { versions: [1], compression: ["zlib"], client };
    if (token) hello.token = token;
    if (idToken) hello.idToken = idToken;
    if (session) hello.session = session;
    larder.hello = await larder.request(Opcode.HELLO, hello);
    larder.compression = larder.hello.compression;
    larder.threshold = larder.hello.compressionThreshold ?? 1024;
    return larder;
  }

  /** Sends a request; resolves with its answer's JSON (and `binary` when one came), rejects with a LarderError. */
  async request(opcode, body = {}, binary = undefined) {
    if (this.closed) throw this.closed;
    if (this.socket.readyState !== WebSocket.OPEN) throw new Error("the connection is closing");
    const requestID = this.nextID++;
    let json = body && Object.keys(body).length ? encoder.encode(JSON.stringify(body)) : new Uint8Array(0);
    let flags = 0;
    let uncompressedLength = 0;
    if (this.compression === "zlib" && opcode !== Opcode.HELLO && json.length >= this.threshold) {
      const packed = await deflate(json);
      if (packed.length < json.length) {
        uncompressedLength = json.length;
        json = packed;
        flags |= Flags.COMPRESSED;
      }
    }
    const answer = new Promise((resolve, reject) => this.pending.set(requestID, { resolve, reject }));
    this.socket.send(encodeFrame({ opcode, requestID, flags, json, binary, uncompressedLength }));
    return answer;
  }

  /** Whether requests can still be sent: the socket is open, not closing or ended. */
  get isOpen() { return !this.closed && this.socket.readyState === WebSocket.OPEN; }

  close() { this.socket.close(1000); }

  async #received(bytes) {
    let frame;
    let body;
    try {
      frame = decodeFrame(bytes);
      body = await frameJSON(frame);
    } catch (error) {
      this.closed = error;
      this.socket.close(1002);
      return;
    }
    if (frame.flags & Flags.PUSH) {
      this.onEvent?.(body);
      return;
    }
    const waiter = this.pending.get(frame.requestID);
    if (!waiter) {
      // Opcode 0, request id 0: the connection's own error before it ends (Protocol.md section 7).
      this.closed = new LarderError(frame.status, body);
      return;
    }
    this.pending.delete(frame.requestID);
    if (frame.status !== 0) waiter.reject(new LarderError(frame.status, body));
    else waiter.resolve(frame.binaryLength ? Object.assign(body, { binary: frame.binary }) : body);
  }

  #ended(event) {
    const error = this.closed ?? new Error(`the connection closed (${event.code})`);
    this.closed = error;
    for (const waiter of this.pending.values()) waiter.reject(error);
    this.pending.clear();
    this.onClose?.(error);
  }
}
