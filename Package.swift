// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "transferd",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "transferd", targets: ["transferd"]),
        .library(name: "TransferCore", targets: ["TransferCore"]),
    ],
    targets: [
        .systemLibrary(
            name: "CCurl",
            pkgConfig: "libcurl",
            providers: [.apt(["libcurl4-openssl-dev"]), .brew(["curl"])]
        ),
        .systemLibrary(
            name: "CCrypto",
            pkgConfig: "libcrypto",
            providers: [.apt(["libssl-dev"]), .brew(["openssl@3"])]
        ),
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]
        ),
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"]), .brew(["zlib"])]
        ),
        .systemLibrary(
            name: "CPostgres",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"]), .brew(["libpq"])]
        ),
        .systemLibrary(
            name: "CMicroHTTPD",
            pkgConfig: "libmicrohttpd",
            providers: [.apt(["libmicrohttpd-dev"]), .brew(["libmicrohttpd"])]
        ),
        // Extended attributes (sys/xattr.h): the C library's, no package needed.
        .systemLibrary(name: "CSystem"),
        .target(
            name: "TransferCore",
            dependencies: ["CCurl", "CCrypto", "CSQLite", "CZlib", "CSystem", "CPostgres", "CMicroHTTPD"],
            exclude: ["Control/Dashboard/README.md"],
            resources: [
                // The dashboard's page, script and style, built into the binary.
                .embedInCode("Control/Dashboard/index.html"),
                .embedInCode("Control/Dashboard/dashboard.js"),
                .embedInCode("Control/Dashboard/dashboard.css"),
            ]
        ),
        .executableTarget(
            name: "transferd",
            dependencies: ["TransferCore"]
        ),
        .target(
            name: "TestSupport",
            dependencies: ["TransferCore", "CPostgres"],
            path: "Tests/TestSupport"
        ),
        .testTarget(
            name: "UnitTests",
            dependencies: ["TransferCore", "TestSupport"]
        ),
        .testTarget(
            name: "ConformanceTests",
            dependencies: ["TransferCore", "TestSupport"]
        ),
        .testTarget(
            name: "RenderingTests",
            dependencies: ["transferd", "TransferCore"],
            exclude: ["Golden"]
        ),
        .testTarget(
            name: "EndToEndTests",
            dependencies: ["TransferCore", "TestSupport"]
        ),
    ]
)
