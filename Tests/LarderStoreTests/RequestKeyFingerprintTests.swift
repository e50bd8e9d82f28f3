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
}
