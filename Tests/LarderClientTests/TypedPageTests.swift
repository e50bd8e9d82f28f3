import Foundation
import LarderTestThreads
import Testing

@testable import LarderClient

/// Typed pages read from answer bytes: a record that does not decode is reported, not thrown, whichever way the
/// answer is read (without a tree in the server's usual form, or through the general parser otherwise).
@Suite(.ownThreads, .timeLimit(.minutes(20))) struct TypedPageTests {
    struct Todo: Codable, Sendable, Equatable {
        var title: String
        var isFinish: Bool
    }

    static let ids = [
        "3f2504e0-4f89-41d3-9a0c-0305e82c3301", "6ba7b810-9dad-11d1-80b4-00c04fd430c8",
        "0e3b9a8c-2f4d-4e61-9c3a-7d8e9f0a1b2c", "7c9e6679-7425-40de-944b-e07fc1f90ae7",
    ]

    static func record(_ id: String, _ data: String) -> String {
        #"{"id":"\#(id)","rev":1,"createdAt":"2026-11-30T00:26:28.123Z","updatedAt":"2026-11-30T00:26:28.123Z","#
            + #""data":\#(data)}"#
    }

    /// A page of two good records around two that do not decode; `cursor` is the JSON text of `nextCursor`.
    static func answer(cursor: String) -> [UInt8] {
        let records = [
            record(ids[0], #"{"title":"Buy milk","isFinish":false}"#),
            record(ids[1], #"{"title":987654321,"isFinish":false}"#),
            record(ids[2], #"{"isFinish":true}"#), record(ids[3], #"{"title":"買牛奶","isFinish":true}"#),
        ]
        return Array(#"{"records":[\#(records.joined(separator: ","))],"nextCursor":\#(cursor)}"#.utf8)
    }

    @Test func bothReadersReportTheRecordsThatDoNotDecode() throws {
        // A plain cursor is read without a tree; an escaped one sends the answer through the general parser.
        for cursor in [#""c1""#, #""c\u0031""#] {
            let page = try LarderCollection<Todo>.page(answer: Self.answer(cursor: cursor))
            #expect(page.nextCursor == "c1")
            #expect(page.records.map(\.id.wireString) == [Self.ids[0], Self.ids[3]], "\(cursor)")
            #expect(page.values == [Todo(title: "Buy milk", isFinish: false), Todo(title: "買牛奶", isFinish: true)])
            #expect(page.undecodable.map(\.id.wireString) == [Self.ids[1], Self.ids[2]], "\(cursor)")
            #expect(page.undecodable.map(\.error.status) == [.decodingFailed, .decodingFailed])
            #expect(page.undecodable.map(\.error.field) == ["title", "title"])
            #expect(page.undecodable.first?.record.data == ["title": 987_654_321, "isFinish": false])
            #expect(page.undecodable.first?.record.createdAt == Date(timeIntervalSince1970: 1_795_998_388.123))
            // The description names the record, never its data.
            #expect(page.undecodable.first?.description.contains("987654321") == false)
        }
    }

    @Test func anAnswerThatIsNotAPageIsStillAnError() throws {
        #expect(throws: LarderError.self) { try LarderCollection<Todo>.page(answer: Array(#"{"records":3}"#.utf8)) }
        let broken = Array(#"{"records":[{"id":"\#(Self.ids[0])","rev":1,"data":{}}],"nextCursor":null}"#.utf8)
        #expect(throws: LarderError.self) { try LarderCollection<Todo>.page(answer: broken) }
    }
}
