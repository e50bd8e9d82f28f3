// swift-tools-version:6.0
import Foundation
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "Larder",
    // The server needs Linux (epoll; see README "Platforms"). LarderWire and LarderClient are portable
    // POSIX and target Apple platforms too, at the versions Synchronization and task executors need; only Linux is
    // verified (scripts/test).
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
        // libdeflate (MIT): the CRC-32 of upload chunks (UploadMessages.swift), folded with PCLMULQDQ.
        .systemLibrary(
            name: "CLibDeflate", pkgConfig: "libdeflate",
            providers: [.apt(["libdeflate-dev"]), .brew(["libdeflate"])]),
        // OpenSSL's libcrypto (Apache-2.0): SHA-256 on Linux (Digest.swift).
        .systemLibrary(
            name: "COpenSSL", pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"]), .brew(["openssl@3"])]),
        // GnuTLS (LGPL 2.1+): TLS for the server's TCP port and the clients.
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
        // epoll and eventfd (part of the C library: no package, nothing to link).
        .systemLibrary(name: "CEpoll"),
        // The one lock (a pthread mutex, which ThreadSanitizer sees) and its condition variable.
        .target(name: "LarderSync", swiftSettings: strict),
        // What every part that does I/O shares (package access): the socket and system-call layer, the event loop
        // (Linux only: epoll), the histogram and SplitMix64. No Linux-only call outside `#if os(Linux)`.
        .target(
            name: "LarderIO",
            dependencies: ["LarderSync", .target(name: "CEpoll", condition: .when(platforms: [.linux]))],
            swiftSettings: strict),
        // SHA-256 from libcrypto on Linux; Apple platforms use CommonCrypto (Digest.swift).
        .target(
            name: "LarderWire",
            dependencies: ["CZlib", "CLibDeflate", .target(name: "COpenSSL", condition: .when(platforms: [.linux]))],
            swiftSettings: strict),
        // Thumbnails: JPEG bytes and a size in, baseline JPEG bytes out (no I/O).
        .target(name: "LarderThumbnails", dependencies: ["LarderWire", "CTurboJPEG"], swiftSettings: strict),
        // TLS sessions driven through memory, for the server's event loops and the client alike.
        .target(name: "LarderTLS", dependencies: ["CGnuTLS"], swiftSettings: strict),
        .target(
            name: "LarderStore", dependencies: ["LarderWire", "LarderSync", "LarderIO", "CSQLite", "CLibPQ"],
            swiftSettings: strict),
        .target(
            name: "LarderServer",
            dependencies: [
                "LarderWire", "LarderStore", "LarderSync", "LarderIO", "LarderTLS", "CMicroHTTPD", "LarderThumbnails",
            ],
            swiftSettings: strict),
        .target(
            name: "LarderClient", dependencies: ["LarderWire", "LarderSync", "LarderIO", "LarderTLS"],
            swiftSettings: strict),
        .target(
            name: "LarderCLI", dependencies: ["LarderClient", "LarderSync", "LarderIO", "CLibEdit"], swiftSettings: strict),
        .target(
            name: "LarderBench", dependencies: ["LarderWire", "LarderSync", "LarderIO", "LarderTLS", "CEpoll"],
            swiftSettings: strict),
        .executableTarget(name: "larder-server", dependencies: ["LarderServer", "LarderWire"], swiftSettings: strict),
        .executableTarget(name: "larder", dependencies: ["LarderCLI"], swiftSettings: strict),
        .executableTarget(
            name: "larder-bench", dependencies: [
                "LarderBench", "LarderClient", "LarderStore", "LarderWire", "LarderIO", "LarderThumbnails",
            ],
            swiftSettings: strict),
        // What the test targets share: the throwaway PostgreSQL they start and the child processes they launch
        // (Tests/LarderTestSupport).
        .systemLibrary(name: "CChildProcess", path: "Tests/CChildProcess"),
        .target(
            name: "LarderTestSupport", dependencies: ["LarderStore", "LarderSync", "LarderWire", "CChildProcess"],
            path: "Tests/LarderTestSupport"),
        .testTarget(name: "LarderWireTests", dependencies: ["LarderWire", "LarderIO"]),
        .testTarget(
            name: "LarderStoreTests",
            dependencies: ["LarderStore", "LarderSync", "LarderIO", "LarderTestSupport", "LarderThumbnails"],
            resources: [.copy("Fixtures")]),
        .testTarget(
            name: "LarderServerTests", dependencies: ["LarderServer", "LarderSync", "LarderIO", "LarderTestSupport"]),
        .testTarget(name: "LarderClientTests", dependencies: ["LarderClient", "LarderCLI", "LarderSync", "LarderIO"]),
        .testTarget(
            name: "LarderBenchTests",
            dependencies: ["LarderBench", "LarderServer", "LarderStore", "LarderSync", "LarderIO", "LarderTestSupport"]),
        .testTarget(
            name: "IntegrationTests",
            dependencies: [
                "LarderServer", "LarderClient", "LarderStore", "LarderBench", "LarderSync", "LarderIO",
                "LarderTestSupport", "LarderTLS", "LarderThumbnails",
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
        "LarderSync", "LarderIO", "LarderWire", "LarderThumbnails", "LarderTLS", "LarderStore", "LarderServer",
        "LarderClient", "LarderTestSupport", "CChildProcess", "LarderWireTests", "LarderStoreTests", "LarderServerTests",
        "larder-sanitizer-canary",
    ]
    package.targets.removeAll { !core.contains($0.name) }
    package.products = [.library(name: "LarderClient", targets: ["LarderClient"])]
    let endToEnd = ["ServerEndToEndTests.swift", "ServerTestSupport.swift", "GateSupport.swift"]
    let integration = Context.packageDirectory + "/Tests/IntegrationTests"
    let others = ((try? FileManager.default.contentsOfDirectory(atPath: integration)) ?? [])
        .filter { !endToEnd.contains($0) && $0 != "Fixtures" }
    package.targets.append(
        .testTarget(
            name: "ServerEndToEndTests", dependencies: ["LarderServer", "LarderClient", "LarderIO", "LarderSync", "LarderWire"],
            path: "Tests/IntegrationTests",
            exclude: others, sources: endToEnd, resources: [.copy("Fixtures")]))
}
