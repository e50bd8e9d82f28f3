#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation

/// A process's user plus system CPU seconds so far, from /proc/PID/stat (fields 14 and 15); nil where /proc does not
/// tell (Linux only).
func processCPUSeconds(_ pid: Int32) -> Double? {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = text.lastIndex(of: ")")
    else { return nil }
    // Fields after the command name (which may hold spaces), counted from field 3.
    let fields = text[text.index(after: close)...].split(separator: " ")
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

/// Runs `work` on the cooperative pool and waits for it on this thread: a subcommand's main thread has nothing else
/// to do meanwhile.
func waitForTask<T: Sendable, E: Error>(_ work: @escaping @Sendable () async throws(E) -> T) throws(E) -> T {
    let box = TaskResult<T, E>()
    let done = DispatchSemaphore(value: 0)
    Task {
        do throws(E) {
            box.result = .success(try await work())
        } catch {
            box.result = .failure(error)
        }
        done.signal()
    }
    done.wait()
    return try box.result!.get()
}

/// The task's outcome, written by the task before it signals and read after the wait.
private final class TaskResult<T: Sendable, E: Error>: @unchecked Sendable {
    var result: Result<T, E>?
}
