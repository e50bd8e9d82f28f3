// swift-tools-version:6.0
import Foundation
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

// The portable configuration (LARDER_PORTABLE=1 in the environment; a step of scripts/test, in its own scratch path):
// a Linux build of the client with the dependencies and code paths an Apple platform's build has. It declares only
// the client's modules and their tests, drops the Linux-only libraries (libdeflate, libcrypto, GnuTLS, epoll) and
// defines LARDER_PORTABLE, under which the code does what it does on Apple platforms: CRC-32 from zlib, sockets
// through poll(2). What is Apple's alone stands aside: SHA-256 is computed in Swift (CommonCrypto there), and there
// is no TLS (Network.framework there). A client module that depends on anything else fails to resolve here.
let portable = Context.environment["LARDER_PORTABLE"] != nil

/// A dependency only Linux builds have: absent on Apple platforms, and from the portable configuration.
func linuxOnly(_ name: String) -> [Target.Dependency] {
    portable ? [] : [.target(name: name, condition: .when(platforms: [.linux]))]
}

/// The settings of the modules the portable configuration builds.
let portableSettings: [SwiftSetting] = portable ? [.define("LARDER_PORTABLE")] : []

/// The sources of the test directory `Tests/<directory>` the portable configuration builds: `kept` (nil, all of them,
/// in the Linux build). They are named, not found by listing the directory, because SwiftPM keeps a manifest's result
/// until the manifest itself changes: a listing would go stale as files are added.
func portableKeeps(_ kept: [String]) -> [String]? { portable ? kept : nil }

let package = Package(
    name: "Larder",
    // The server needs Linux (epoll; see README "Platforms"). LarderWire and LarderClient are portable
    // POSIX and target Apple platforms too, at the versions Synchronization and task executors need; what is verified
    // is the Linux build and the portable configuration (scripts/test).
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "LarderClient", targets: ["LarderClient"]),
        .library(name: "LarderWire", targets: ["LarderWire"]),
        .executable(name: "larder-server", targets: ["larder-server"]),
        .executable(name: "larder", targets: ["larder"]),
        .executable(name: "larder-bench", targets: ["larder-bench"]),
    ],
    targets: [
        .systemLibrary(
            name: "CZlib", pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"]), .brew(["zlib"])]),
        .systemLibrary(
            name: "CSQLite", pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]),
        .systemLibrary(
            name: "CLibPQ", pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"]), .brew(["libpq"])]),
        // libedit (BSD licence): line editing, history and completion for the `larder` prompt.
        .systemLibrary(
            name: "CLibEdit", pkgConfig: "libedit",
            providers: [.apt(["libedit-dev"]), .brew(["libedit"])]),
        // libdeflate (MIT): the CRC-32 of upload chunks on Linux (UploadMessages.swift), folded with PCLMULQDQ; zlib's
        // elsewhere.
        .systemLibrary(
            name: "CLibDeflate", pkgConfig: "libdeflate",
            providers: [.apt(["libdeflate-dev"]), .brew(["libdeflate"])]),
        // xxHash (BSD 2-Clause): the fingerprint a request key keeps of its request (RequestKey.swift).
        .systemLibrary(
            name: "CXXHash", pkgConfig: "libxxhash",
            providers: [.apt(["libxxhash-dev"]), .brew(["xxhash"])]),
        // OpenSSL's libcrypto (Apache-2.0): SHA-256 on Linux (Digest.swift).
        .systemLibrary(
            name: "COpenSSL", pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"]), .brew(["openssl@3"])]),
        // libargon2 (CC0 / Apache-2.0): Argon2id password hashes for the accounts Larder keeps (LarderAuth).
        .systemLibrary(
            name: "CArgon2", pkgConfig: "libargon2",
            providers: [.apt(["libargon2-dev"]), .brew(["argon2"])]),
        // GnuTLS (LGPL 2.1+): TLS for the server's TCP port and the clients on Linux (Network.framework on Apple
        // platforms).
        .systemLibrary(
            name: "CGnuTLS", pkgConfig: "gnutls",
            providers: [.apt(["libgnutls28-dev"]), .brew(["gnutls"])]),
        // GNU libmicrohttpd (LGPL 2.1+): the HTTP server of --metrics-port (/metrics, /healthz).
        .systemLibrary(
            name: "CMicroHTTPD", pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"]), .brew(["libmicrohttpd"])]),
        // libjpeg-turbo's TurboJPEG (BSD-style): thumbnails of stored photos, with scaled decoding.
        .systemLibrary(
            name: "CTurboJPEG", pkgConfig: "libturbojpeg",
            providers: [.apt(["libturbojpeg0-dev"]), .brew(["jpeg-turbo"])]),
        // Collection schemas: PCRE2 (BSD), the regular expressions of `pattern`, and the schema compiler and validator
        // (a pure module: no I/O). Not in the portable configuration.
        .systemLibrary(
            name: "CPCRE2", pkgConfig: "libpcre2-8",
            providers: [.apt(["libpcre2-dev"]), .brew(["pcre2"])]),
        .target(name: "LarderSchema", dependencies: ["LarderWire", "CPCRE2"], swiftSettings: strict),
        // ICU (Unicode licence): the collators of sorts under a collation, registered with SQLite (PostgreSQL uses its
        // own ICU collations).
        .systemLibrary(
            name: "CICU", pkgConfig: "icu-i18n",
            providers: [.apt(["libicu-dev"]), .brew(["icu4c"])]),
        .testTarget(name: "LarderSchemaTests", dependencies: ["LarderTestThreads", "LarderSchema", "LarderWire"]),
        // epoll and eventfd (part of the C library: no package, nothing to link).
        .systemLibrary(name: "CEpoll"),
        // The one lock (a pthread mutex, which ThreadSanitizer sees) and its condition variable.
        .target(name: "LarderSync", swiftSettings: strict),
        // What every part that does I/O shares (package access), portable: the system-call and socket layer,
        // connecting, the monotonic clock, the histogram, SplitMix64 and the argument scanner. No Linux-only call outside
        // `#if os(Linux)` (CEpoll's shim holds Linux's writeback hint).
        .target(
            name: "LarderIO", dependencies: ["LarderSync"] + linuxOnly("CEpoll"),
            swiftSettings: strict + portableSettings),
        // What the server and the benchmark add to it, Linux only: the epoll event loop, and the sockets only a server
        // opens (listening, accepting, sendfile).
        .target(
            name: "LarderEventLoop", dependencies: ["LarderIO", "LarderSync", "CEpoll"], swiftSettings: strict),
        // CRC-32 from libdeflate and SHA-256 from libcrypto on Linux; Apple platforms use zlib's and CommonCrypto's
        // (UploadMessages.swift, Digest.swift).
        .target(
            name: "LarderWire", dependencies: ["CZlib"] + linuxOnly("CLibDeflate") + linuxOnly("COpenSSL"),
            swiftSettings: strict + portableSettings),
        // Thumbnails: JPEG bytes and a size in, baseline JPEG bytes out (no I/O).
        .target(name: "LarderThumbnails", dependencies: ["LarderWire", "CTurboJPEG"], swiftSettings: strict),
        // Identity: OpenID Connect ID tokens verified against JWKS files (signatures by libcrypto), Argon2id password
        // hashes and session tokens. Pure: no I/O but reading a JWKS file.
        .target(name: "LarderAuth", dependencies: ["LarderWire", "COpenSSL", "CArgon2"], swiftSettings: strict),
        // TLS sessions driven through memory, for the server's event loops and the client alike.
        .target(name: "LarderTLS", dependencies: ["CGnuTLS"], swiftSettings: strict),
        .target(
            name: "LarderStore", dependencies: [
                "LarderWire", "LarderSchema", "LarderSync", "LarderIO", "CSQLite", "CLibPQ", "CICU", "CXXHash",
            ],
            swiftSettings: strict),
        .target(
            name: "LarderServer",
            dependencies: [
                "LarderWire", "LarderStore", "LarderSync", "LarderIO", "LarderEventLoop", "LarderTLS", "CMicroHTTPD",
                "LarderThumbnails", "LarderSchema", "LarderAuth",
            ],
            swiftSettings: strict),
        // TLS through GnuTLS on Linux, Network.framework on Apple platforms (NetworkTLS.swift). SQLite holds a local
        // replica's file (LarderReplica): the system's libsqlite3 on Apple platforms, as on Linux.
        .target(
            name: "LarderClient",
            dependencies: ["LarderWire", "LarderSync", "LarderIO", "CSQLite"] + linuxOnly("LarderTLS"),
            swiftSettings: strict + portableSettings),
        .target(
            name: "LarderCLI", dependencies: ["LarderClient", "LarderSync", "LarderIO", "CLibEdit"],
            swiftSettings: strict),
        .target(
            name: "LarderBench",
            dependencies: ["LarderWire", "LarderSync", "LarderIO", "LarderEventLoop", "LarderTLS", "CEpoll"],
            swiftSettings: strict),
        // The server's command: its options (ServerOptions.swift) are its own; the library takes a configuration value.
        .executableTarget(
            name: "larder-server",
            dependencies: ["LarderServer", "LarderStore", "LarderWire", "LarderIO", "LarderEventLoop"],
            swiftSettings: strict),
        .executableTarget(name: "larder", dependencies: ["LarderCLI"], swiftSettings: strict),
        .executableTarget(
            name: "larder-bench", dependencies: [
                "LarderBench", "LarderClient", "LarderStore", "LarderWire", "LarderIO", "LarderThumbnails",
            ],
            swiftSettings: strict),
        // What the test targets share: the throwaway PostgreSQL they start, the raw client and listener-free server
        // their server tests drive, and the keys and ID tokens they sign (Tests/LarderTestSupport), and the child
        // processes they launch (Tests/LarderTestProcess, which the portable configuration's tests use too).
        .target(
            name: "LarderTestSupport",
            dependencies: ["LarderServer", "LarderStore", "LarderSync", "LarderWire", "LarderIO", "LarderTestProcess"],
            path: "Tests/LarderTestSupport"),
        .systemLibrary(name: "CChildProcess", path: "Tests/CChildProcess"),
        .target(
            name: "LarderTestProcess", dependencies: ["LarderSync", "CChildProcess"], path: "Tests/LarderTestProcess"),
        // The trait that runs a suite's test cases on threads of their own (Tests/LarderTestThreads).
        .target(name: "LarderTestThreads", path: "Tests/LarderTestThreads"),
        // `larder-server` for the tests of a server process: the same command with test hooks read from its environment
        // (Tests/larder-server-test links the server's own ServerCommand.swift and ServerOptions.swift). Not a product.
        .executableTarget(
            name: "larder-server-test",
            dependencies: [
                "LarderServer", "LarderStore", "LarderWire", "LarderIO", "LarderEventLoop", "LarderTestProcess",
            ],
            path: "Tests/larder-server-test", swiftSettings: strict),
        // An app with a local replica as a process the tests kill mid-drain (Tests/larder-replica-test). Not a product.
        .executableTarget(
            name: "larder-replica-test", dependencies: ["LarderClient"], path: "Tests/larder-replica-test",
            swiftSettings: strict),
        // In the portable configuration too: LarderIO is the portable layer.
        // The larder-server command's options (ServerOptions.swift).
        .testTarget(
            name: "LarderServerCommandTests",
            dependencies: ["LarderTestThreads", "larder-server", "LarderServer", "LarderWire"]),
        .testTarget(
            name: "LarderIOTests", dependencies: ["LarderTestThreads", "LarderIO"], swiftSettings: portableSettings),
        .testTarget(
            name: "LarderEventLoopTests",
            dependencies: ["LarderTestThreads", "LarderEventLoop", "LarderIO", "LarderSync"]),
        .testTarget(name: "LarderCLITests", dependencies: ["LarderTestThreads", "LarderCLI", "LarderClient"]),
        // In the portable configuration: the suites of what differs there (CRC-32 and SHA-256).
        .testTarget(
            name: "LarderWireTests", dependencies: ["LarderTestThreads", "LarderWire", "LarderIO"],
            sources: portableKeeps(["CRC32Tests.swift", "DigestTests.swift"]),
            swiftSettings: portableSettings),
        .testTarget(
            name: "LarderStoreTests",
            dependencies: [
                "LarderTestThreads", "LarderStore", "LarderSync", "LarderIO", "LarderTestSupport", "LarderTestProcess",
                "LarderThumbnails",
            ],
            resources: [.copy("Fixtures")]),
        .testTarget(
            name: "LarderServerTests",
            dependencies: ["LarderTestThreads", "LarderServer", "LarderSync", "LarderIO", "LarderTestSupport"]),
        // In the portable configuration: the suites that need only the client and a server (which the Linux build
        // provides).
        .testTarget(
            name: "LarderClientTests",
            dependencies: ["LarderTestThreads", "LarderClient", "LarderSync", "LarderIO", "LarderTestProcess"]
                + (portable ? [] : ["LarderCLI"]),
            sources: portableKeeps([
                "ClientTests.swift", "EndpointsTests.swift", "FakeServer.swift", "NonBlockingClientTests.swift",
                "PortableClientTests.swift",
            ]),
            swiftSettings: portableSettings),
        .testTarget(
            name: "LarderBenchTests",
            dependencies: [
                "LarderTestThreads", "LarderBench", "LarderServer", "LarderStore", "LarderSync", "LarderIO",
                "LarderTestProcess",
                "LarderTestSupport",
            ]),
        .testTarget(
            name: "LarderAuthTests",
            dependencies: ["LarderTestThreads", "LarderAuth", "LarderTestProcess", "LarderTestSupport"]),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "LarderTestThreads", "LarderServer", "LarderClient", "LarderStore", "LarderBench", "LarderSync",
                "LarderIO",
                "LarderEventLoop", "LarderTestSupport", "LarderTestProcess", "LarderTLS", "LarderThumbnails",
                "larder-server", "larder-server-test", "larder-replica-test",
            ],
            resources: [.copy("Fixtures")]),
    ],
    swiftLanguageModes: [.v6]
)

// The sanitizers' canary (a race and a leak on purpose), built only by scripts/sanitize, which sets this variable.
if Context.environment["LARDER_SANITIZER_CANARY"] != nil {
    package.targets.append(
        .executableTarget(
            name: "larder-sanitizer-canary", dependencies: ["LarderSync"], path: "Sanitize/Canary",
            swiftSettings: strict))
}

// The sanitizers' run on the suite's core in CI (`scripts/sanitize --core`, which sets this variable): only the
// modules and tests of the core are built (the wire, the connection and WATCH state machines, the store, and the
// server end to end), so each sanitizer's build from clean costs a part of the whole package's.
if Context.environment["LARDER_SANITIZE_CORE"] != nil {
    let core: Set<String> = [
        "CZlib", "CSQLite", "CLibPQ", "CLibDeflate", "COpenSSL", "CGnuTLS", "CMicroHTTPD", "CTurboJPEG", "CEpoll",
        "CPCRE2", "CICU", "CArgon2", "CXXHash", "LarderAuth", "LarderSync", "LarderIO", "LarderEventLoop", "LarderWire",
        "LarderSchema", "LarderThumbnails", "LarderTLS", "LarderStore", "LarderServer", "LarderClient", "LarderTestSupport", "LarderTestProcess",
        "LarderTestThreads", "CChildProcess", "LarderWireTests", "LarderStoreTests", "LarderServerTests",
        "larder-sanitizer-canary",
    ]
    package.targets.removeAll { !core.contains($0.name) }
    package.products = [.library(name: "LarderClient", targets: ["LarderClient"])]
    let endToEnd = ["ServerEndToEndTests.swift", "ServerTestSupport.swift", "GateSupport.swift"]
    let integration = Context.packageDirectory + "/Tests/IntegrationTests"
    // Only to quiet SwiftPM's note on the directory's other files; `sources` decides what is built.
    let others = ((try? FileManager.default.contentsOfDirectory(atPath: integration)) ?? [])
        .filter { !endToEnd.contains($0) && $0 != "Fixtures" }
    package.targets.append(
        .testTarget(
            name: "ServerEndToEndTests",
            dependencies: [
                "LarderTestThreads", "LarderServer", "LarderClient", "LarderIO", "LarderSync", "LarderWire",
                "LarderTestSupport",
            ],
            path: "Tests/IntegrationTests",
            exclude: others, sources: endToEnd, resources: [.copy("Fixtures")]))
}

// The portable configuration (above): the client's modules and their tests alone.
if portable {
    let modules: Set = [
        "CZlib", "CSQLite", "LarderSync", "LarderIO", "LarderWire", "LarderClient", "LarderIOTests", "LarderWireTests",
        "LarderClientTests", "CChildProcess", "LarderTestProcess", "LarderTestThreads",
    ]
    package.products = package.products.filter { modules.contains($0.name) }
    package.targets = package.targets.filter { modules.contains($0.name) }
}
