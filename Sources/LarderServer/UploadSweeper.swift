#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Dispatch
import Foundation
import LarderStore
import LarderSync
import LarderTLS
import LarderWire
import LarderIO

/// A repeating timer on a queue of its own (a dispatch source: safe to cancel from any thread).
final class UploadSweeper: @unchecked Sendable {
    private let timer: any DispatchSourceTimer

    init(intervalMs: Int, _ sweep: @escaping @Sendable () -> Void) {
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "larder.uploads", qos: .utility))
        timer.schedule(deadline: .now() + .milliseconds(intervalMs), repeating: .milliseconds(intervalMs))
        timer.setEventHandler(handler: sweep)
        timer.activate()
    }

    func cancel() { timer.cancel() }
}
