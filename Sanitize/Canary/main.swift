// The sanitizers' canary: a race and a leak made on purpose, for `scripts/sanitize` to prove that ThreadSanitizer
// sees `Locked` and that LeakSanitizer is on. Built only when LARDER_SANITIZER_CANARY is set (Package.swift).
//
//   larder-sanitizer-canary race   exactly one data race: one write under a lock, one without (under -sanitize=thread)
//   larder-sanitizer-canary leak   exactly one leak, of 4,096 bytes (under -sanitize=address, detect_leaks=1)
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import LarderSync

/// Counters that threads write, each guarded (or not) as its function says.
final class Shared: @unchecked Sendable {
    let counter = Locked(0)
    let lock = Lock()
    var underLock = 0  // guarded by `lock`
    var raced = 0  // written once under `lock` and once without: the race
}

/// Runs `body` on a new thread. `pthread_create` and `pthread_join` order the thread's work after the caller's before
/// and before the caller's after, and nothing else orders it, which a race report needs.
func spawn(_ body: @escaping @Sendable () -> Void) -> pthread_t {
    final class Box {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    let argument = Unmanaged.passRetained(Box(body)).toOpaque()
#if canImport(Darwin)
    var thread: pthread_t?
#else
    var thread = pthread_t()
#endif
    let error = pthread_create(&thread, nil, { argument in
        Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue().body()
        return nil
    }, argument)
    precondition(error == 0, "pthread_create failed with error \(error)")
#if canImport(Darwin)
    return thread!
#else
    return thread
#endif
}

func join(_ threads: [pthread_t]) {
    for thread in threads { pthread_join(thread, nil) }
}

/// Four threads add to the same values under the lock: none of this may be reported, or TSan does not see `Locked`
/// and `Lock` as locks.
@inline(never)
func addUnderTheLock(_ shared: Shared) {
    join((0..<4).map { _ in
        spawn {
            for _ in 0..<1_000 {
                shared.counter.withLock { $0 += 1 }
                shared.lock.withLock { shared.underLock += 1 }
            }
        }
    })
    let total = shared.counter.withLock { $0 } + shared.lock.withLock { shared.underLock }
    precondition(total == 8_000, "the lock lost an increment: \(total) of 8000")
}

@inline(never)
func writeUnderTheLock(_ shared: Shared) {
    shared.lock.withLock { shared.raced += 1 }
}

/// The forgotten lock: the one report expected.
@inline(never)
func writeWithoutTheLock(_ shared: Shared) {
    shared.raced += 1
}

@inline(never)
func race() {
    let shared = Shared()
    addUnderTheLock(shared)
    join([spawn { writeUnderTheLock(shared) }, spawn { writeWithoutTheLock(shared) }])
    print("canary: raced on purpose (\(shared.raced) writes)")
}

/// Allocates 4,096 bytes and forgets them: the one leak expected. On a thread that then ends, so that no stale copy
/// of the address on a live stack can make the block look reachable.
@inline(never)
func leakOnPurpose() {
    join([spawn {
        let bytes = UnsafeMutableRawPointer.allocate(byteCount: 4_096, alignment: 16)
        bytes.storeBytes(of: 1, as: UInt8.self)
    }])
    print("canary: leaked 4096 bytes on purpose")
}

switch CommandLine.arguments.dropFirst().first {
case "race": race()
case "leak": leakOnPurpose()
default:
    let usage = "usage: larder-sanitizer-canary race|leak\n"
    _ = usage.withCString { write(2, $0, strlen($0)) }
    exit(64)
}
