import CLibPQ
import Foundation
import LarderWire

/// A value bound to a PostgreSQL statement. Every value travels in binary form with its type, so nothing a client
/// sent is ever parsed as SQL text, and text needs no terminating NUL (no copy to make one).
enum PGValue {
    case null
    case int(Int64)
    case text(String)
    /// Text given as its UTF-8 bytes (a document's compact JSON, spliced as it is).
    case textBytes([UInt8])
    case bytes([UInt8])
    case uuid(UUID)
    case bool(Bool)
    /// A one-dimensional array in PostgreSQL's binary array format (`PGArray`).
    case array(PGArray)

    var oid: UInt32 {
        switch self {
        case .null: 0
        case .int: 20
        case .text, .textBytes: 25
        case .bytes: 17
        case .uuid: 2950
        case .bool: 16
        case .array(let array): array.arrayOID
        }
    }

    /// Appends the binary form; false for NULL (nothing appended).
    func append(to out: inout [UInt8]) -> Bool {
        switch self {
        case .null: return false
        case .int(let value): PGArray.appendInt64(value, to: &out)
        case .text(var text): text.withUTF8 { out.append(contentsOf: $0) }
        case .textBytes(let bytes), .bytes(let bytes): out.append(contentsOf: bytes)
        case .uuid(let id): withUnsafeBytes(of: id.uuid) { out.append(contentsOf: $0) }
        case .bool(let flag): out.append(flag ? 1 : 0)
        case .array(let array): out.append(contentsOf: array.bytes)
        }
        return true
    }
}

/// A one-dimensional array of text, int8 or uuid in PostgreSQL's binary format (`array_recv`): dimensions, then each
/// element as a 4-byte length (-1 for NULL) and its bytes.
struct PGArray {
    enum Element: UInt32 {
        case text = 25
        case int8 = 20
        case uuid = 2950

        var arrayOID: UInt32 {
            switch self {
            case .text: 1009
            case .int8: 1016
            case .uuid: 2951
            }
        }
    }

    let element: Element
    private(set) var bytes: [UInt8] = []
    private var count: Int32 = 0
    private var hasNull = false
    private var body: [UInt8] = []

    var arrayOID: UInt32 { element.arrayOID }

    init(_ element: Element) {
        self.element = element
        finish()
    }

    init(texts: [String]) {
        self.init(.text)
        for text in texts { append(.text(text)) }
    }

    init(ints: [Int64]) {
        self.init(.int8)
        for value in ints { append(.int(value)) }
    }

    init(uuids: [UUID]) {
        self.init(.uuid)
        for id in uuids { append(.uuid(id)) }
    }

    /// Appends an element (of this array's type, or `.null`).
    mutating func append(_ value: PGValue) {
        let lengthAt = body.count
        body.append(contentsOf: [0, 0, 0, 0])
        if value.append(to: &body) {
            let length = UInt32(body.count - lengthAt - 4)
            for i in 0..<4 { body[lengthAt + i] = UInt8(truncatingIfNeeded: length >> (24 - 8 * UInt32(i))) }
        } else {
            for i in 0..<4 { body[lengthAt + i] = 0xFF }
            hasNull = true
        }
        count += 1
        finish()
    }

    private mutating func finish() {
        var header: [UInt8] = []
        PGArray.appendInt32(count == 0 ? 0 : 1, to: &header)
        PGArray.appendInt32(hasNull ? 1 : 0, to: &header)
        PGArray.appendInt32(Int32(bitPattern: element.rawValue), to: &header)
        if count > 0 {
            PGArray.appendInt32(count, to: &header)
            PGArray.appendInt32(1, to: &header)
        }
        bytes = header + body
    }

    static func appendInt32(_ value: Int32, to out: inout [UInt8]) {
        let bits = UInt32(bitPattern: value)
        for shift in stride(from: 24, through: 0, by: -8) {
            out.append(UInt8(truncatingIfNeeded: bits >> UInt32(shift)))
        }
    }

    static func appendInt64(_ value: Int64, to out: inout [UInt8]) {
        let bits = UInt64(bitPattern: value)
        for shift in stride(from: 56, through: 0, by: -8) {
            out.append(UInt8(truncatingIfNeeded: bits >> UInt64(shift)))
        }
    }
}

/// One statement of a pipeline: its SQL, its values, and a name when it is prepared once per connection and reused.
struct PGStatement {
    var sql: String
    var values: [PGValue]
    /// Prepared under this name on first use (fixed statements); nil runs it unnamed (searches, whose text varies).
    var name: String?

    init(_ sql: String, _ values: [PGValue] = [], name: String? = nil) {
        self.sql = sql
        self.values = values
        self.name = name
    }
}
