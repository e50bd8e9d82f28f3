import Foundation
import LarderTestThreads
import LarderWire
import Testing

/// Every hex example in Protocol.md is decoded here, so the document and the code cannot drift apart.
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct ProtocolVectorTests {
    struct Vector {
        var name: String
        var bytes: [UInt8]
    }

    /// The ```hex blocks of Protocol.md; in each, `;` starts a comment and the first comment names the vector.
    static let vectors: [Vector] = {
        let url = URL(fileURLWithPath: #filePath)
            .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Protocol.md")
        let text = (try? String(contentsOf: url, encoding: .utf8)) ?? ""
        var vectors: [Vector] = []
        var current: Vector?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```hex") {
                current = Vector(name: "", bytes: [])
                continue
            }
            guard var vector = current else { continue }
            if line.hasPrefix("```") {
                vectors.append(vector)
                current = nil
                continue
            }
            let parts = line.split(separator: ";", maxSplits: 1, omittingEmptySubsequences: false)
            if parts.count > 1, vector.name.isEmpty, let range = parts[1].range(of: "vector:") {
                vector.name = parts[1][range.upperBound...].trimmingCharacters(in: .whitespaces)
            }
            vector.bytes += parts[0].split(separator: " ").map { UInt8($0, radix: 16)! }
            current = vector
        }
        return vectors
    }()

    static func vector(_ name: String) throws -> Frame {
        let vector = try #require(vectors.first { $0.name == name }, "Protocol.md has no vector \(name)")
        var decoder = FrameDecoder()
        var buffer = ByteBuffer(vector.bytes)
        let frame = try #require(try decoder.next(&buffer))
        #expect(buffer.readableCount == 0, "vector \(name) has bytes after its frame")
        return frame
    }

    static let expectedNames: Set<String> = [
        "hello-request", "hello-response", "ping-request", "ping-response", "create-request", "blob-put-request",
        "error-response", "search-response-compressed", "event-push", "conflict-response", "bad-magic-response",
        "permission-denied-response", "backup-read-request", "backup-read-response", "blob-get-range-request",
        "blob-get-range-response", "blob-upload-chunk-request", "blob-upload-status-response",
        "blob-get-thumbnail-request", "blob-get-range-past-end-request", "schema-set-request",
        "schema-violation-response", "create-keyed-request",
        "hello-id-token-request", "hello-id-token-expired-response", "search-collation-request", "sign-in-request",
        "session-refresh-request",
    ]

    /// The ranged BLOB_GET: the request's members, and an answer carrying exactly those bytes with `offset` and
    /// `length` beside the BlobInfo; a range past the end asks for more and is answered the same.
    @Test func blobGetRange() throws {
        let request = try Self.vector("blob-get-range-request")
        #expect(request.opcode == .blobGet && request.binary.isEmpty)
        let get = try BlobGetRequest(json: try request.jsonObject())
        let id = try #require(UUID(wireString: "9b2e0a4c-58d1-4f7e-8a3b-2f6c1d0e5a77"))
        #expect(get == BlobGetRequest(id: id, offset: 8, length: 9))
        #expect(get.json.bytes == request.json)
        let response = try Self.vector("blob-get-range-response")
        #expect(response.opcode == .blobGet && response.isResponse && response.requestID == request.requestID)
        let object = try response.jsonObject()
        let info = try BlobInfo(json: object)
        #expect(info.id == id && info.size == 17 && info.width == 1 && info.height == 1)
        #expect(object["offset"]?.intValue == 8 && object["length"]?.intValue == 9)
        #expect(response.binary == [0x01, 0x00, 0x01, 0x01, 0x01, 0x11, 0x00, 0xFF, 0xD9])
        // The digest is the whole blob's: the 8 bytes before the range and these.
        let whole: [UInt8] = [0xFF, 0xD8, 0xFF, 0xC0, 0x00, 0x0B, 0x08, 0x00] + response.binary
        #expect(info.sha256 == SHA256.hex(whole))
        // A range past the end: the same request with a longer `length`, answered by the same 9 bytes.
        let past = try Self.vector("blob-get-range-past-end-request")
        #expect(past.opcode == .blobGet && past.requestID == response.requestID)
        #expect(try BlobGetRequest(json: try past.jsonObject()) == BlobGetRequest(id: id, offset: 8, length: 65_536))
        #expect(BlobGetRequest(id: id, offset: 8, length: 65_536).json.bytes == past.json)
    }

    /// A chunk of a resumable upload: its CRC-32 is the binary part's; and the resume-offset answer.
    @Test func blobUploadChunkAndStatus() throws {
        let chunk = try Self.vector("blob-upload-chunk-request")
        #expect(chunk.opcode == .blobUploadChunk && chunk.binary.count == 9)
        let request = try BlobUploadChunkRequest(json: try chunk.jsonObject())
        let upload = try #require(UUID(wireString: "7c9e6679-7425-40de-944b-e07fc1f90ae7"))
        #expect(request.upload == upload && request.offset == 8)
        #expect(request.crc32 == CRC32.checksum(chunk.binary))
        #expect(request.json.bytes == chunk.json)
        let status = try Self.vector("blob-upload-status-response")
        #expect(status.opcode == .blobUploadStatus && status.isResponse)
        let info = try BlobUploadInfo(json: try status.jsonObject())
        #expect(info.upload == upload && info.size == 17 && info.offset == 8 && info.chunkBytes == 1 << 20)
        #expect(info.expiresAt == Timestamp.parse("2026-12-02T16:40:00.000Z"))
        #expect(info.json.bytes == status.json)
    }

    @Test func everyVectorIsNamedAndChecked() {
        #expect(Self.vectors.count >= 6)
        #expect(Set(Self.vectors.map(\.name)) == Self.expectedNames)
    }

    @Test func backupRead() throws {
        let request = try Self.vector("backup-read-request")
        #expect(request.opcode == .backupRead)
        let read = try BackupReadRequest(json: try request.jsonObject())
        #expect(read == BackupReadRequest(backup: 1, offset: 0, length: 4 << 20))
        #expect(read.json.bytes == request.json)
        let response = try Self.vector("backup-read-response")
        #expect(response.opcode == .backupRead && response.flags.contains(.response))
        let answer = try BackupReadRequest(json: try response.jsonObject())
        #expect(answer.length == response.binary.count)
        #expect(answer.json.bytes == response.json)
        #expect(response.binary == Array("SQLite format 3\0".utf8))
    }

    @Test func helloRequest() throws {
        let frame = try Self.vector("hello-request")
        #expect(frame.opcode == .hello && frame.requestID == 1 && !frame.isResponse)
        let hello = try HelloRequest(json: frame.jsonObject())
        #expect(hello == HelloRequest(versions: [1], compression: ["zlib"], client: "larder-cli 0.1.0"))
        // Re-encoding gives the same bytes.
        #expect(FrameEncoder().encode(frame) == Self.vectors.first { $0.name == "hello-request" }!.bytes)
    }

    @Test func helloResponse() throws {
        let frame = try Self.vector("hello-response")
        #expect(frame.opcode == .hello && frame.requestID == 1 && frame.isResponse && frame.status == .ok)
        let hello = try HelloResponse(json: frame.jsonObject())
        #expect(hello.version == 1 && hello.compression == "zlib" && hello.compressionThreshold == 1024)
        #expect(hello.limits == .default)
        #expect(hello.authRequired == false)
        // Exactly what the server writes, every limit included.
        let expected = HelloResponse(
            version: 1, compression: "zlib", compressionThreshold: 1024, limits: .default,
            server: "larder-server 0.1.0", authRequired: false)
        #expect(frame.json == expected.json.bytes)
    }

    @Test func ping() throws {
        let request = try Self.vector("ping-request")
        let response = try Self.vector("ping-response")
        #expect(request.opcode == .ping && request.json.isEmpty && request.requestID == 2)
        #expect(response.opcode == .ping && response.isResponse && response.requestID == 2)
        #expect(try request.jsonObject().isEmpty)
    }

    @Test func create() throws {
        let frame = try Self.vector("create-request")
        let create = try CreateRequest(json: frame.jsonObject())
        #expect(frame.opcode == .create && frame.requestID == 3)
        #expect(create == CreateRequest(collection: "todos", data: ["title": "Buy milk 買牛奶", "isFinish": false]))
    }

    /// A CREATE carrying a `requestKey` (section 5.10): the member beside the request's own, a UUID string.
    @Test func createWithARequestKey() throws {
        let frame = try Self.vector("create-keyed-request")
        #expect(frame.opcode == .create && frame.requestID == 11 && !frame.isResponse)
        var object = try frame.jsonObject()
        #expect(object["requestKey"] == .string("0b7e5f1c-2d3a-4e8b-9c6d-1a2b3c4d5e6f"))
        object["requestKey"] = nil
        #expect(try CreateRequest(json: object) == CreateRequest(collection: "todos", data: ["title": "Buy milk"]))
        #expect(FrameEncoder().encode(frame) == Self.vectors.first { $0.name == "create-keyed-request" }!.bytes)
    }

    /// A SEARCH whose sort key names a collation and its strength (section 5.2).
    @Test func searchUnderACollation() throws {
        let frame = try Self.vector("search-collation-request")
        #expect(frame.opcode == .search && frame.requestID == 9 && !frame.isResponse)
        var object = try frame.jsonObject()
        #expect(object["collection"] == "todos")
        object["collection"] = nil
        let query = try SearchQuery(json: object)
        #expect(query.sort == [SortKey(field: try FieldPath("title"), collation: "en", strength: 2)] && query.limit == 20)
        #expect(FrameEncoder().encode(frame) == Self.vectors.first { $0.name == "search-collation-request" }!.bytes)
    }

    @Test func blobPut() throws {
        let frame = try Self.vector("blob-put-request")
        let put = try BlobPutRequest(json: frame.jsonObject())
        #expect(frame.opcode == .blobPut && frame.requestID == 4)
        #expect(put.attach == BlobAttachment(collection: "items", id: UUID(uuidString: "3f2504e0-4f89-41d3-9a0c-0305e82c3301")!))
        #expect(frame.binary.prefix(2) == [0xFF, 0xD8] && frame.binary.suffix(2) == [0xFF, 0xD9])
        #expect(frame.binary.count == 17)
    }

    @Test func blobGetThumbnail() throws {
        let frame = try Self.vector("blob-get-thumbnail-request")
        #expect(frame.opcode == .blobGet && frame.requestID == 10 && !frame.isResponse && frame.binary.isEmpty)
        let request = try BlobGetRequest(json: frame.jsonObject())
        #expect(request == BlobGetRequest(id: UUID(uuidString: "3f2504e0-4f89-41d3-9a0c-0305e82c3301")!, thumbnail: 256))
        // Re-encoding gives the same bytes.
        #expect(request.json.bytes == frame.json)
        #expect(FrameEncoder().encode(frame) == Self.vectors.first { $0.name == "blob-get-thumbnail-request" }!.bytes)
    }

    @Test func errorResponse() throws {
        let frame = try Self.vector("error-response")
        #expect(frame.status == .notFound && frame.isResponse && frame.opcode == .get && frame.requestID == 5)
        let error = LarderError(status: frame.status, json: .object(try frame.jsonObject()))
        #expect(error.field == "id")
        #expect(error.message.hasPrefix("no document"))
    }

    /// HELLO with an ID token in place of a role token, and the answer to one that has expired: UNAUTHENTICATED
    /// naming the field and the reason, without the token.
    @Test func helloWithAnIDToken() throws {
        let request = try Self.vector("hello-id-token-request")
        #expect(request.opcode == .hello && !request.isResponse && request.requestID == 1)
        let hello = try HelloRequest(json: try request.jsonObject())
        let token = try #require(hello.idToken)
        #expect(hello.token == nil && token.split(separator: ".").count == 3)
        #expect(hello.json.bytes == request.json)
        let response = try Self.vector("hello-id-token-expired-response")
        #expect(response.status == .unauthenticated && response.isResponse && response.requestID == 1)
        let expected = LarderError(
            .unauthenticated, "ID token expired (exp 1800000000); sign in again for a fresh ID token",
            field: "idToken", details: ["reason": "expired"])
        #expect(response.json == expected.json.bytes)
        #expect(!String(decoding: response.json, as: UTF8.self).contains(token))
    }

    /// SIGN_IN: an email and a password, read as the server reads them and written back byte for byte.
    @Test func signInRequest() throws {
        let request = try Self.vector("sign-in-request")
        #expect(request.opcode == .signIn && request.opcode.name == "SIGN_IN" && request.requestID == 2)
        let credentials = try AccountCredentials(json: try request.jsonObject())
        #expect(credentials == AccountCredentials(email: "ann@example.com", password: "correct horse battery staple"))
        #expect(credentials.json.bytes == request.json)
    }

    /// SESSION_REFRESH: no members, as the client encodes it.
    @Test func sessionRefreshRequest() throws {
        let request = try Self.vector("session-refresh-request")
        #expect(request.opcode == .sessionRefresh && request.opcode.name == "SESSION_REFRESH" && request.requestID == 3)
        #expect(try SessionRefreshRequest(json: try request.jsonObject()) == SessionRefreshRequest())
        #expect(SessionRefreshRequest().json.bytes == request.json)
    }

    @Test func conflictResponse() throws {
        let frame = try Self.vector("conflict-response")
        #expect(frame.status == .conflict && frame.isResponse && frame.opcode == .replace && frame.requestID == 8)
        let error = LarderError(status: frame.status, json: .object(try frame.jsonObject()))
        #expect(error.field == "rev" && error.details["currentRev"] == 3)
        // The order the server writes: details, then code, name, message, field.
        let expected = LarderError(
            .conflict, "the document is at revision 3, not 2; read it again and retry", field: "rev",
            details: ["currentRev": 3])
        #expect(frame.json == expected.json.bytes)
    }

    /// SCHEMA_SET's request as the client encodes it, and a write's refusal with its `violations` as the server
    /// writes it (details first) and the client reads it.
    @Test func schemaSetAndViolationResponse() throws {
        let request = try Self.vector("schema-set-request")
        #expect(request.opcode == .schemaSet && request.opcode.rawValue == 0x0023 && !request.isResponse)
        let set = try SchemaSetRequest(json: try request.jsonObject())
        #expect(set.collection == "todos" && set.validationAction == .error)
        #expect(set.schema == ["type": "object", "required": ["title"], "properties": ["title": ["type": "string"]]])
        #expect(set.json.bytes == request.json)
        let frame = try Self.vector("schema-violation-response")
        #expect(frame.status == .invalidArgument && frame.isResponse && frame.opcode == .create && frame.requestID == 12)
        let violation = SchemaViolation(pointer: "/title", keyword: "type", expected: "string", found: "3")
        let error = LarderError(status: frame.status, json: .object(try frame.jsonObject()))
        #expect(error.violations == [violation] && error.field == "data")
        let expected = LarderError(
            .invalidArgument,
            "the record does not match the schema of 'todos': /title: type: expected string, found 3; "
                + "change the record, or the schema with SCHEMA_SET",
            field: "data", details: ["violations": [violation.json]])
        #expect(frame.json == expected.json.bytes)
        // Any other error has none.
        #expect(LarderError(.invalidArgument, "x").violations.isEmpty)
    }

    @Test func permissionDeniedResponse() throws {
        let frame = try Self.vector("permission-denied-response")
        #expect(frame.status == .permissionDenied && frame.status.rawValue == 14 && frame.isResponse)
        #expect(frame.opcode == .create && frame.requestID == 9)
        let expected = LarderError(
            .permissionDenied, "this token may not send CREATE: it needs the write role and holds read",
            details: ["opcode": "CREATE"])
        #expect(frame.json == expected.json.bytes)
    }

    /// What a stranger gets: the decoder's own error for an HTTP request, framed as the server sends it.
    @Test func badMagicResponse() throws {
        let frame = try Self.vector("bad-magic-response")
        #expect(frame.status == .protocolError && frame.isResponse && frame.opcode.rawValue == 0 && frame.requestID == 0)
        var decoder = FrameDecoder()
        var buffer = ByteBuffer(Array("GET / HTTP/1.1\r\nHost: x\r\n\r\n".utf8))
        do {
            _ = try decoder.next(&buffer)
            Issue.record("an HTTP request decoded as a frame")
        } catch {
            #expect(error.requestID == 0 && error.opcode.rawValue == 0)
            #expect(frame.json == error.error.json.bytes)
        }
    }

    @Test func eventPush() throws {
        let frame = try Self.vector("event-push")
        #expect(frame.opcode == .event && frame.isPush && !frame.isResponse && frame.status == .ok)
        let event = try ChangeEvent(json: frame.jsonObject())
        #expect(frame.requestID == event.subscription && event.subscription == 1)
        #expect(event.seq == 42 && event.kind == .create && event.collection == "todos" && event.rev == 1)
        #expect(event.id == UUID(uuidString: "3f2504e0-4f89-41d3-9a0c-0305e82c3301"))
        #expect(event.timeMs == Timestamp.parse("2026-11-30T00:26:28.123Z"))
        #expect(event.record?.data == ["title": "Buy milk", "isFinish": false])
        // The model writes the same bytes, and the frame re-encodes to the vector.
        #expect(event.json.bytes == frame.json)
        #expect(FrameEncoder().encode(frame) == Self.vectors.first { $0.name == "event-push" }!.bytes)
    }

    @Test func compressedSearchResponse() throws {
        let vector = try #require(Self.vectors.first { $0.name == "search-response-compressed" })
        #expect(vector.bytes[7] & Frame.Flags.compressed.rawValue != 0)
        let frame = try Self.vector("search-response-compressed")
        #expect(frame.json.count == 1983)
        let page = try PageResponse(json: frame.jsonObject())
        #expect(page.records.count == 8)
        #expect(page.records.first?.data["name"] == "张三")
        #expect(page.records.last?.data["address"] == "北京市海淀区中关村大街8号")
        #expect(page.nextCursor == nil)
    }
}
