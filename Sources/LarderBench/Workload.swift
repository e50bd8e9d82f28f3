#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import LarderIO

/// One kind of request in the operation mix.
public enum BenchOperation: Int, CaseIterable, Sendable, Hashable, CustomStringConvertible {
    case get, create, replace, patch, delete, search, count, blobPut, blobGet
    /// A PATCH that names the revision it expects, of a document this run created (its revision is tracked).
    case patchRev

    /// The name used in `--mix`, `--assert`, reports and JSON.
    public var name: String {
        switch self {
        case .get: "get"
        case .create: "create"
        case .replace: "replace"
        case .patch: "patch"
        case .delete: "delete"
        case .search: "search"
        case .count: "count"
        case .blobPut: "blob-put"
        case .blobGet: "blob-get"
        case .patchRev: "patch-rev"
        }
    }

    public var description: String { name }

    public init?(name: String) {
        guard let op = BenchOperation.allCases.first(where: { $0.name == name }) else { return nil }
        self = op
    }

    /// Operations that address a preloaded document, so `--preload` (or `--keyspace`) must provide keys.
    var readsPreloadedDocuments: Bool {
        switch self {
        case .get, .replace, .patch, .search, .count: true
        default: false
        }
    }

    /// Operations that change the store: the requests that take a `requestKey`.
    var writes: Bool {
        switch self {
        case .create, .replace, .patch, .patchRev, .delete, .blobPut: true
        case .get, .search, .count, .blobGet: false
        }
    }

    /// Operations a Redis target can express (GET and SET).
    static let redisOperations: [BenchOperation] = [.get, .create, .replace]
}

/// The operation mix: an integer weight per operation.
public struct OperationMix: Sendable, Equatable, CustomStringConvertible {
    /// Weights indexed by `BenchOperation.rawValue`.
    public private(set) var weights: [Int]

    public init(_ pairs: [(BenchOperation, Int)]) {
        weights = [Int](repeating: 0, count: BenchOperation.allCases.count)
        for (op, weight) in pairs { weights[op.rawValue] += weight }
    }

    public subscript(op: BenchOperation) -> Int { weights[op.rawValue] }
    public var total: Int { weights.reduce(0, +) }
    /// The operations with a non-zero weight, in declaration order.
    public var operations: [BenchOperation] { BenchOperation.allCases.filter { self[$0] > 0 } }
    public func contains(_ op: BenchOperation) -> Bool { self[op] > 0 }

    /// `get=80,create=20`: the `--mix` syntax, and how the configuration is printed.
    public var description: String { operations.map { "\($0.name)=\(self[$0])" }.joined(separator: ",") }

    /// Parses `get=80,create=20`; a bare name means weight 1.
    public static func parse(_ text: String) throws(UsageError) -> OperationMix {
        var pairs: [(BenchOperation, Int)] = []
        for item in text.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = item.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(parts[0]).trimmingWhitespace
            guard let op = BenchOperation(name: name) else {
                throw UsageError(
                    "--mix: unknown operation '\(name)'; use "
                        + BenchOperation.allCases.map(\.name).joined(separator: ", "))
            }
            var weight = 1
            if parts.count == 2 {
                guard let w = Int(String(parts[1]).trimmingWhitespace), w >= 0, w <= 1_000_000 else {
                    throw UsageError("--mix: the weight of \(name) must be a whole number from 0 to 1000000")
                }
                weight = w
            }
            if pairs.contains(where: { $0.0 == op }) { throw UsageError("--mix: \(name) is given twice") }
            pairs.append((op, weight))
        }
        let mix = OperationMix(pairs)
        guard mix.total > 0 else { throw UsageError("--mix: at least one weight must be above 0") }
        return mix
    }
}

extension String {
    var trimmingWhitespace: String {
        var s = Substring(self)
        while let c = s.first, c == " " || c == "\t" { s.removeFirst() }
        while let c = s.last, c == " " || c == "\t" { s.removeLast() }
        return String(s)
    }
}

/// How keys are chosen among `0..<keyspace`.
public enum KeyDistribution: String, Sendable, CaseIterable {
    case uniform, zipf, sequential
}

/// Where the ids of the documents and blobs a run creates come from (`--ids`).
public enum IDSource: String, Sendable, CaseIterable {
    /// The request names no id: the server makes one (time-ordered, version 7), as LarderClient's creates do.
    /// Against Redis, whose SET must name a key, the keys are those of `streams`.
    case server
    /// Random version 4 UUIDs, as apps make with `UUID()` on the device: every create lands at a random place in
    /// the id index.
    case random
    /// One ordered stream per worker (`nnnnnnnn-wwww-4000-a000-cccccccccccc`): as many insertion points as workers.
    case streams
}

/// The Zipfian generator of Gray et al. ("Quickly generating billion-record synthetic databases"), as YCSB uses it:
/// rank r is chosen with probability proportional to 1 / (r+1)^theta. The O(n) zeta sum is computed once per run.
/// Ranks are scrambled into keys by a bijection, so the hot keys are spread over the key space rather than being the
/// first ones written (which would sit together in the same B-tree pages and flatter the store).
public struct Zipf: Sendable {
    public let n: UInt64
    public let theta: Double
    let zetaN: Double
    let alpha: Double
    let eta: Double
    let half: Double
    let scramble: UInt64

    public init(n: UInt64, theta: Double = 0.99) {
        precondition(n >= 1 && theta > 0 && theta < 1)
        self.n = n
        self.theta = theta
        var zeta = 0.0
        for i in 1...n { zeta += 1 / pow(Double(i), theta) }
        zetaN = zeta
        let zeta2 = 1 + 1 / pow(2, theta)
        alpha = 1 / (1 - theta)
        eta = n < 2 ? 1 : (1 - pow(2 / Double(n), 1 - theta)) / (1 - zeta2 / zeta)
        half = 1 + pow(0.5, theta)
        // A multiplier coprime with n makes rank -> rank * m mod n a permutation.
        var m: UInt64 = 2_654_435_761 % Swift.max(n, 1)
        while n > 1 && Zipf.gcd(m, n) != 1 { m += 1 }
        scramble = Swift.max(m, 1)
    }

    /// The rank (0 is the most popular) for a uniform `u` in [0, 1).
    func rank(_ u: Double) -> UInt64 {
        let uz = u * zetaN
        if uz < 1 { return 0 }
        if uz < half { return Swift.min(1, n - 1) }
        let r = UInt64(Double(n) * pow(eta * u - eta + 1, alpha))
        return Swift.min(r, n - 1)
    }

    /// A key in `0..<n`.
    @inline(__always)
    package func next(_ rng: inout SplitMix64) -> UInt64 {
        n.dividingFullWidth(rank(rng.unit()).multipliedFullWidth(by: scramble)).remainder
    }

    static func gcd(_ a: UInt64, _ b: UInt64) -> UInt64 { b == 0 ? a : gcd(b, a % b) }
}
