import Foundation
import XCTest

/// A TCP proxy in front of the test's PostgreSQL (Tests/Servers/cut_proxy.py), started and
/// stopped by PID: `cut()` closes every connection at once and refuses new ones, as a restart
/// of the server, a failover or an outage of the network does to its clients; `restore()`
/// accepts them again.
package final class CutProxy {
    private let process = Process()
    /// `store` with the proxy's port in place of the server's.
    package let url: String

    package init(store: String) throws {
        var components = try XCTUnwrap(URLComponents(string: store))
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Servers/cut_proxy.py").path
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", script, components.host ?? "127.0.0.1", String(components.port ?? 5432)]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let line = String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
        components.port = try XCTUnwrap(Int(line.trimmingCharacters(in: .whitespacesAndNewlines)), "proxy port: \(line)")
        url = try XCTUnwrap(components.string)
    }

    /// The port the proxy listens on.
    package var port: Int { URLComponents(string: url)?.port ?? 0 }

    package func cut() { kill(process.processIdentifier, SIGUSR1) }
    package func restore() { kill(process.processIdentifier, SIGUSR2) }

    deinit {
        process.terminate()
        process.waitUntilExit()
    }
}
