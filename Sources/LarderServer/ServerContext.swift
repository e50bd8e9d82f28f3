import LarderIO
import Synchronization

/// What connections share: the router, the counters, the log and the in-flight total.
final class ServerContext: Sendable {
    let router: Router
    let stats: ServerStats
    let logger: Logger
    let machineConfiguration: ConnectionStateMachine.Configuration
    /// The accounts Larder keeps (`--users`); nil: none.
    let accounts: PasswordAccounts?
    /// Requests in flight on every connection (for shutdown).
    let inFlight = AtomicCounter()
    /// BACKUP and BACKUP_READ.
    let backups: BackupService

    init(
        router: Router, stats: ServerStats, logger: Logger, machineConfiguration: ConnectionStateMachine.Configuration,
        accounts: PasswordAccounts? = nil, backups: BackupService
    ) {
        self.accounts = accounts
        self.backups = backups
        self.router = router
        self.stats = stats
        self.logger = logger
        self.machineConfiguration = machineConfiguration
    }
}

/// A counter shared between threads: an atomic, relaxed (only its value is read, never used to order other memory).
final class AtomicCounter: Sendable {
    private let value = Synchronization.Atomic<Int>(0)
    func add(_ delta: Int) { value.add(delta, ordering: .relaxed) }
    var current: Int { value.load(ordering: .relaxed) }
}
