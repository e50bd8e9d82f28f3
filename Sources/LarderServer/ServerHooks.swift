/// Testing only: the points where a server waits until a test lets it go on (`TestGate`), given to the server when it
/// is made (`LarderServer(configuration:hooks:)`). The shipped `larder-server` gives none, and nothing of the product
/// (no option, no environment variable) sets them; a test of a server process uses a test-only build of it.
package struct ServerHooks: Sendable, Equatable {
    /// Every SEARCH waits here before it runs, so a test can act while one is surely in flight.
    package var search: TestGate?
    /// The server waits here before it opens its store (a test signals a server still starting).
    package var start: TestGate?
    /// Every BACKUP waits here inside its snapshot's read transaction, so a test can write while a backup is surely in
    /// progress.
    package var backup: TestGate?
    /// On PostgreSQL, the change follower waits here before each read of the shared log, so a test can hold a server
    /// behind the others.
    package var follower: TestGate?

    /// Hooks at the gates given; none by default.
    package init(search: TestGate? = nil, start: TestGate? = nil, backup: TestGate? = nil, follower: TestGate? = nil) {
        self.search = search
        self.start = start
        self.backup = backup
        self.follower = follower
    }
}
