import Foundation

/// Waits for `condition`, checking every 20 ms, for at most `seconds`: the tests' one wait for something to happen.
/// The deadlines callers pass are generous (a loaded 2-core machine); they run out only when the condition never
/// will, and cost nothing when it holds. Answers whether the condition came true.
public func waitUntil(_ seconds: Double, _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return try await condition()
}
