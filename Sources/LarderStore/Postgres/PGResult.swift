import CLibPQ
import Foundation
import LarderWire

/// The rows of one statement, read in binary form. Frees libpq's result when dropped.
final class PGResult {
    let raw: OpaquePointer

    init(_ raw: OpaquePointer) { self.raw = raw }

    deinit { PQclear(raw) }

    var rows: Int { Int(PQntuples(raw)) }

    /// Rows an INSERT, UPDATE or DELETE touched.
    var affected: Int { Int(String(cString: PQcmdTuples(raw))) ?? 0 }

    func isNull(_ row: Int, _ column: Int) -> Bool { PQgetisnull(raw, Int32(row), Int32(column)) == 1 }

    func withBytes<T>(_ row: Int, _ column: Int, _ body: (UnsafeRawBufferPointer) -> T) -> T {
        let length = Int(PQgetlength(raw, Int32(row), Int32(column)))
        guard let value = PQgetvalue(raw, Int32(row), Int32(column)), length > 0 else {
            return body(UnsafeRawBufferPointer(start: nil, count: 0))
        }
        return body(UnsafeRawBufferPointer(start: UnsafeRawPointer(value), count: length))
    }

    func bytes(_ row: Int, _ column: Int) -> [UInt8] { withBytes(row, column) { Array($0) } }

    func text(_ row: Int, _ column: Int) -> String {
        withBytes(row, column) { String(decoding: $0, as: UTF8.self) }
    }

    /// An integer column (int2, int4 or int8, by its length).
    func int(_ row: Int, _ column: Int) -> Int64 {
        withBytes(row, column) { bytes in
            var value: UInt64 = 0
            for byte in bytes { value = value << 8 | UInt64(byte) }
            switch bytes.count {
            case 2: return Int64(Int16(truncatingIfNeeded: value))
            case 4: return Int64(Int32(truncatingIfNeeded: value))
            default: return Int64(bitPattern: value)
            }
        }
    }

    func bool(_ row: Int, _ column: Int) -> Bool { withBytes(row, column) { $0.first == 1 } }

    func uuid(_ row: Int, _ column: Int) -> UUID {
        withBytes(row, column) { bytes in
            var raw: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &raw) { target in
                target.copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes.prefix(16)))
            }
            return UUID(uuid: raw)
        }
    }
}

/// What a PostgreSQL server said about a failed statement.
struct PGFailure: Error {
    var sqlState: String
    var message: String
    /// Which statement of the pipeline failed (counting every statement sent, prepares included: see `pipeline`).
    var statementIndex: Int?

    /// Whether the statement failed because the server or the connection went away (or could not take it now): the
    /// request may succeed once PostgreSQL is back.
    var isUnavailable: Bool {
        sqlState.hasPrefix("08") || sqlState.hasPrefix("57P") || sqlState == "53300" || sqlState.hasPrefix("53")
            || sqlState == "40001" || sqlState == "40P01" || sqlState.isEmpty
    }
}
