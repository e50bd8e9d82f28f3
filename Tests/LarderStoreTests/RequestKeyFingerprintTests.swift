import Foundation
import LarderTestThreads
import LarderWire
import Testing

@testable import LarderStore

/// What a request key keeps of its request: a fingerprint that tells a retry of the same write from another write
/// sent with the same key, stable across versions (servers sharing a database, and keys stored before an upgrade).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct RequestKeyFingerprintTests {
    let key = UUID(uuidString: "0190f3a2-7c1e-7d4a-9b2e-5f6a7b8c9d0e")!
    let id = UUID(uuidString: "3f2504e0-4f89-41d3-9a0c-0305e82c3301")!

    func create(_ data: String, collection: String = "todos", id: UUID? = nil, rev: Int64? = nil) -> RequestKey {
        RequestKey.document(key, .create, collection: collection, id: id, rev: rev, data: Array(data.utf8))
    }

    /// The fingerprint of one request, written down: a server of another version sharing the database must compute
    /// the same one for the same request. (The value is xxHash's own `XXH3_128bits` of the bytes `00 10 "todos" 00 00
    /// 00` and the document, high half first, as a C program linked with libxxhash prints it.)
    @Test func theFingerprintIsXXH3OfTheCanonicalRequest() {
        let request = create(#"{"title":"Buy milk","isFinish":false}"#)
        #expect(request.request == "CREATE todos")
        #expect(request.digest == "c2d49712235f41473877b23c9e53098b")
        #expect(request.digest.utf8.count == 32)
    }

    /// A CREATE's or REPLACE's fingerprint is made from its parts, without the canonical form in one buffer: it is
    /// still the hash of that form, for documents short and long (XXH3 reads inputs past 240 bytes another way).
    @Test func theFingerprintOfThePartsIsTheFingerprintOfTheWhole() {
        // Around the 240 bytes where XXH3 changes its method and the 4 KiB where the form stops being made whole.
        for length in [0, 1, 100, 170, 200, 240, 1_000, 3_990, 4_000, 4_010, 4_096, 70_000] {
            let document = #"{"t":""# + String(repeating: "x", count: length) + #""}"#
            for (id, rev) in [(nil, nil), (id, nil), (id, Int64(41)), (nil, Int64.max)] as [(UUID?, Int64?)] {
                let request = RequestKey.document(
                    key, .replace, collection: "待办", id: id, rev: rev, data: Array(document.utf8))
                let whole = RequestKey(key: key, canonical: request.canonical)
                #expect(request.digest == whole.digest, "\(length) bytes, id \(id != nil), rev \(rev ?? 0)")
                #expect(request.request == whole.request)
            }
        }
        let canonical = create(#"{"a":1}"#, id: id, rev: 7).canonical
        #expect(canonical == [0x00, 0x10] + Array("todos".utf8) + [0] + Array(id.wireString.utf8) + [0]
            + Array("7".utf8) + [0] + Array(#"{"a":1}"#.utf8))
    }

    @Test func everyPartOfTheRequestChangesIt() {
        let base = create(#"{"title":"Buy milk"}"#)
        let others = [
            create(#"{"title":"Buy tea"}"#), create(#"{"title":"Buy milk"}"#, collection: "shop"),
            create(#"{"title":"Buy milk"}"#, id: id), create(#"{"title":"Buy milk"}"#, rev: 3),
            RequestKey.document(key, .replace, collection: "todos", id: nil, rev: nil, data: Array(#"{"title":"Buy milk"}"#.utf8)),
        ]
        for other in others { #expect(other.digest != base.digest, "\(other.request)") }
        #expect(create(#"{"title":"Buy milk"}"#).digest == base.digest)
    }

    /// A key stored by a server that kept a SHA-256 of the request (64 hex digits) still answers the same request
    /// and still refuses another.
    @Test func aKeyStoredWithTheOlderSHA256FingerprintStillAnswers() throws {
        let request = create(#"{"title":"Buy milk"}"#)
        let answer = Array(#"{"id":"x","rev":1}"#.utf8)
        let legacy = SHA256.hex(request.canonical)
        #expect(try request.answer((request: "CREATE todos", digest: legacy, answer: answer)) == answer)
        #expect(try request.answer((request: "CREATE todos", digest: request.digest, answer: answer)) == answer)
        let other = create(#"{"title":"Buy tea"}"#)
        let refused = #expect(throws: LarderError.self) {
            _ = try other.answer((request: "CREATE todos", digest: legacy, answer: answer))
        }
        #expect(refused?.status == .invalidArgument && refused?.field == "requestKey")
        #expect(throws: LarderError.self) {
            _ = try other.answer((request: "CREATE todos", digest: request.digest, answer: answer))
        }
    }

    /// Every other write's request: its opcode, collection, id (as sent, in lower case) and its JSON without the key,
    /// byte for byte as servers of every version make it.
    @Test func anotherWritesCanonicalFormIsItsNamesAndItsJSON() throws {
        let request = RequestKey.request(
            key, .delete, try object(#"{"collection":"todos","id":"3F2504E0-4F89-41D3-9A0C-0305E82C3301","rev":2}"#))
        let expected: [UInt8] =
            [0x00, 0x15] + Array("todos".utf8) + [0] + Array("3f2504e0-4f89-41d3-9a0c-0305e82c3301".utf8) + [0]
            + Array(#"{"collection":"todos","id":"3F2504E0-4F89-41D3-9A0C-0305E82C3301","rev":2}"#.utf8)
        #expect(Opcode.delete.rawValue == 0x15)
        #expect(request.canonical == expected)
        #expect(request.request == "DELETE todos 3f2504e0-4f89-41d3-9a0c-0305e82c3301")
        let put = RequestKey.request(key, .blobPut, try object(#"{"id":"a"}"#))
        #expect(put.request == "BLOB_PUT a")
        #expect(RequestKey.request(key, .blobDelete, JSONObject()).request == "BLOB_DELETE")
    }

    /// A CREATE's answer is kept without the document it repeats, and a retry (the same request, so the same
    /// document) gets it back whole, byte for byte; an answer that does not end with the document is kept whole.
    @Test func anAnswerIsKeptWithoutTheDocumentItsRetryBringsAgain() throws {
        let document = #"{"title":"Buy milk","isFinish":false}"#
        let request = create(document, id: id)
        let answer = Array((#"{"id":"\#(id.wireString)","rev":1,"createdAt":"2026-12-04T13:00:00.000Z","#
            + #""updatedAt":"2026-12-04T13:00:00.000Z","data":\#(document)}"#).utf8)
        let kept = request.kept(answer)
        #expect(kept.answer.count == answer.count - document.utf8.count)
        #expect(kept.digest.hasPrefix(request.digest + "@"))
        #expect(try request.answer((request: request.request, digest: kept.digest, answer: kept.answer)) == answer)
        // Another document under the same key is another request: refused, not spliced.
        #expect(throws: LarderError.self) {
            _ = try create(#"{"title":"Buy tea","isFinish":false}"#, id: id)
                .answer((request: request.request, digest: kept.digest, answer: kept.answer))
        }
        let other = Array(#"{"id":"x","rev":2}"#.utf8)
        #expect(request.kept(other).answer == other && request.kept(other).digest == request.digest)
        let delete = RequestKey.request(key, .delete, try object(#"{"collection":"todos","id":"x"}"#))
        #expect(delete.kept(other).answer == other && delete.kept(other).digest == delete.digest)
    }
}
