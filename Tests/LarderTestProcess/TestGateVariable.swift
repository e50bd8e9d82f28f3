/// The environment variables with which a test holds a server process (the test-only `larder-server-test`) at its
/// gates: each names the Unix socket the test listens on.
public enum TestGateVariable {
    /// Every SEARCH waits at this gate.
    public static let search = "LARDER_TEST_SEARCH_GATE"
    /// The server waits at this gate before it opens its store.
    public static let start = "LARDER_TEST_START_GATE"
    /// On PostgreSQL, the change follower waits at this gate before each read of the shared log.
    public static let follower = "LARDER_TEST_FOLLOWER_GATE"
}
