import Foundation
@testable import TransferCore
import XCTest

/// The queue stores every store contract test runs against: the SQLite store
/// in a fresh file, and the PostgreSQL store in a fresh database of the server
/// `scripts/test` started (`TRANSFERD_TEST_POSTGRES`).
public enum TestStores {
    /// The PostgreSQL server's URL; a missing one fails the test with the fix.
    public static func postgresURL(file: StaticString = #filePath, line: UInt = #line) throws -> String {
        guard let url = ProcessInfo.processInfo.environment["TRANSFERD_TEST_POSTGRES"], !url.isEmpty else {
            XCTFail("TRANSFERD_TEST_POSTGRES is not set: run the tests with scripts/test, which starts PostgreSQL",
                    file: file, line: line)
            throw XCTSkip("no PostgreSQL")
        }
        return url
    }

    /// A new, empty database on the test server; returns its URL.
    public static func freshPostgresDatabase() throws -> String {
        let admin = try postgresURL()
        let name = "transferd_test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased()
        try PostgresConnection(url: admin).execute("CREATE DATABASE \(name)")
        guard var components = URLComponents(string: admin) else { throw XCTSkip("bad TRANSFERD_TEST_POSTGRES") }
        components.path = "/" + name
        return components.string ?? admin
    }

    /// Runs one statement on a test database (to stage what another process would have done).
    public static func execute(_ url: String, _ sql: String) throws {
        try PostgresConnection(url: url).execute(sql)
    }

    /// Runs one query on a test database; each row's values as text (nil is NULL).
    public static func query(_ url: String, _ sql: String) throws -> [[String?]] {
        try PostgresConnection(url: url).query(sql).map(\.values)
    }

    /// The URL of `url` with another user and password (a role made for a test).
    public static func url(_ url: String, user: String, password: String) -> String {
        guard var components = URLComponents(string: url) else { return url }
        components.user = user
        components.password = password
        return components.string ?? url
    }

    /// The store's schema as an older transferd left it: its first `version` migrations.
    public static func postgresSchema(_ url: String, version: Int) throws {
        let connection = try PostgresConnection(url: url)
        try connection.executeScript("CREATE TABLE transferd_schema (version INTEGER NOT NULL)")
        for step in 0..<version {
            try connection.executeScript(PostgresQueueStore.migrations[step])
            try connection.execute("INSERT INTO transferd_schema (version) VALUES ($1)", [String(step + 1)])
        }
    }

    /// One maker per store kind: each call of a maker opens the same store again (a
    /// second connection, or a second worker on PostgreSQL).
    public static func all() throws -> [(name: String, open: (_ worker: String?) throws -> QueueStore)] {
        let path = NSTemporaryDirectory() + "/transferd-contract-\(UUID().uuidString).db"
        let postgres = try freshPostgresDatabase()
        return [
            ("sqlite", { _ in try SQLiteQueueStore(path: path) }),
            ("postgres", { worker in try PostgresQueueStore(url: postgres, worker: worker ?? "test-worker", leaseSeconds: 30) }),
        ]
    }
}
