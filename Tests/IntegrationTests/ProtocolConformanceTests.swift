#if canImport(Glibc)
import Glibc
#endif
import Foundation
import LarderServer
import LarderWire
import Testing

/// Answers checked against Protocol.md through a real server socket (issue 12): each test names the rule it holds
/// the server to, and fails on the answer the server gave before.
@Suite struct ProtocolConformanceTests {
    /// Section 4: PING's JSON part is empty in both directions, before HELLO and after it.
    @Test func pingAnswersAnEmptyJSONPart() throws {
        try withServerOnPort0 { _, port in
            let c = try RawClient.tcp(port: port)
            let before = try c.call(.ping)
            #expect(before.status == .ok && before.json.isEmpty, "\(before.replyText)")
            try c.hello(compression: [])
            let after = try c.call(.ping)
            #expect(after.status == .ok && after.json.isEmpty, "\(after.replyText)")
        }
    }
}
