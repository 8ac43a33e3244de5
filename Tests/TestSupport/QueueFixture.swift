import Foundation
import TransferCore
import XCTest

/// A queue folder for end-to-end tests: a root with `queue.d/` inside, job
/// files written into it, and the store read back after `transferd run`.
package struct QueueFixture {
    package let root: String
    package var queue: String { root + "/queue.d" }

    package init(_ name: String = #function) throws {
        root = try scratchDirectory(name)
        try FileManager.default.createDirectory(atPath: root + "/queue.d", withIntermediateDirectories: true)
    }

    /// Writes a job file the way users should: to a temporary name, then renamed in.
    package func drop(_ name: String, _ text: String) throws {
        let temporary = queue + "/.\(name).tmp"
        try Data(text.utf8).write(to: URL(fileURLWithPath: temporary))
        guard rename(temporary, queue + "/" + name) == 0 else { throw POSIXFailure(operation: "rename", path: temporary) }
    }

    package func drop(_ name: String, jobs: [[String: Any]]) throws {
        let data = try JSONSerialization.data(withJSONObject: ["version": 1, "jobs": jobs], options: [.sortedKeys])
        try drop(name, String(decoding: data, as: UTF8.self))
    }

    package func run(_ arguments: [String] = []) throws -> TransferdProcess.Result {
        try TransferdProcess.run(["run", "--queue", queue] + arguments, directory: root)
    }

    package func start(_ arguments: [String] = []) throws -> TransferdProcess {
        try TransferdProcess(["run", "--queue", queue] + arguments, directory: root)
    }

    package func store() throws -> SQLiteQueueStore {
        try SQLiteQueueStore(path: queue + "/.transferd/state.db")
    }

    /// The entries of `done/NAME.json` or `failed/NAME.json`.
    package func results(_ folder: String, _ name: String) throws -> [[String: Any]] {
        let path = "\(queue)/\(folder)/\(name)"
        guard let data = FileManager.default.contents(atPath: path) else { return [] }
        return try JSONSerialization.jsonObject(with: data) as? [[String: Any]] ?? []
    }
}

/// Random files in the servers' www folder (each with its own content).
package enum Fixtures {
    package static func makeFiles(in servers: TestServers, folder: String, sizes: [Int]) throws -> [String] {
        let directory = servers.path(folder)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let random = try FileHandle(forReadingFrom: URL(fileURLWithPath: "/dev/urandom"))
        defer { try? random.close() }
        var names: [String] = []
        for (index, size) in sizes.enumerated() {
            let name = "\(folder)/f\(index).bin"
            let path = servers.path(name)
            let existing = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.intValue
            if existing != size {
                try random.readData(ofLength: size).write(to: URL(fileURLWithPath: path))
            }
            names.append(name)
        }
        return names
    }
}

/// Body bytes nginx sent for paths starting with `prefix`, in log lines after `offset`.
package func nginxBytesServed(_ servers: TestServers, pathPrefix prefix: String, since offset: UInt64 = 0) throws -> Int64 {
    Thread.sleep(forTimeInterval: 0.3) // nginx writes the line as the request ends
    let handle = try FileHandle(forReadingFrom: URL(fileURLWithPath: servers.nginxLog))
    try handle.seek(toOffset: offset)
    let text = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
    // Format: METHOD PATH PROTO STATUS BYTES "RANGE" ...
    return text.split(separator: "\n").reduce(0) { total, line in
        let fields = line.split(separator: " ")
        guard fields.count > 4, fields[1].hasPrefix(prefix) else { return total }
        return total + (Int64(fields[4]) ?? 0)
    }
}

package func nginxLogSize(_ servers: TestServers) throws -> UInt64 {
    (try FileManager.default.attributesOfItem(atPath: servers.nginxLog)[.size] as! NSNumber).uint64Value
}
