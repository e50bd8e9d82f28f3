// swift-tools-version:6.0
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "Larder",
    platforms: [.macOS(.v15)],
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
        // epoll and eventfd (part of the C library: no package, nothing to link).
        .systemLibrary(name: "CEpoll"),
        .target(name: "LarderWire", dependencies: ["CZlib"], swiftSettings: strict),
        .target(name: "LarderStore", dependencies: ["LarderWire", "CSQLite", "CLibPQ"], swiftSettings: strict),
        .target(name: "LarderServer", dependencies: ["LarderWire", "LarderStore", "CEpoll"], swiftSettings: strict),
        .target(name: "LarderClient", dependencies: ["LarderWire"], swiftSettings: strict),
        .target(name: "LarderCLI", dependencies: ["LarderClient", "CLibEdit"], swiftSettings: strict),
        .target(name: "LarderBench", dependencies: ["LarderWire"], swiftSettings: strict),
        .executableTarget(name: "larder-server", dependencies: ["LarderServer", "LarderWire"], swiftSettings: strict),
        .executableTarget(name: "larder", dependencies: ["LarderCLI"], swiftSettings: strict),
        .executableTarget(
            name: "larder-bench", dependencies: ["LarderBench", "LarderClient", "LarderStore", "LarderWire"],
            swiftSettings: strict),
        // What the test targets share: the throwaway PostgreSQL they start (Tests/LarderTestSupport).
        .target(name: "LarderTestSupport", dependencies: ["LarderStore"], path: "Tests/LarderTestSupport"),
        .testTarget(name: "LarderWireTests", dependencies: ["LarderWire"]),
        .testTarget(
            name: "LarderStoreTests", dependencies: ["LarderStore", "LarderTestSupport"], resources: [.copy("Fixtures")]),
        .testTarget(name: "LarderServerTests", dependencies: ["LarderServer"]),
        .testTarget(name: "LarderClientTests", dependencies: ["LarderClient", "LarderCLI"]),
        .testTarget(name: "LarderBenchTests", dependencies: ["LarderBench", "LarderServer", "LarderStore"]),
        .testTarget(
            name: "IntegrationTests",
            dependencies: ["LarderServer", "LarderClient", "LarderStore", "LarderBench", "LarderTestSupport"],
            resources: [.copy("Fixtures")]),
    ],
    swiftLanguageModes: [.v6]
)
