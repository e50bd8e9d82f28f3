/// A failed system call or network exchange; the run cannot go on (exit status 2).
public struct BenchError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
