import Foundation
import CPostgres
import TransferCore
import XCTest

/// The queue stores every store contract test runs against: the SQLite store
/// in a fresh file, and the PostgreSQL store in a fresh database of the server
/// `scripts/test` started (`TRANSFERD_TEST_POSTGRES`).
package enum TestStores {
    /// The PostgreSQL server's URL; a missing one fails the test with the fix.
    package static func postgresURL(file: StaticString = #filePath, line: UInt = #line) throws -> String {
        guard let url = ProcessInfo.processInfo.environment["TRANSFERD_TEST_POSTGRES"], !url.isEmpty else {
            XCTFail("TRANSFERD_TEST_POSTGRES is not set: run the tests with scripts/test, which starts PostgreSQL",
                    file: file, line: line)
            throw XCTSkip("no PostgreSQL")
        }
        return url
    }

    /// A new, empty database on the test server; returns its URL.
    package static func freshPostgresDatabase() throws -> String {
        let admin = try postgresURL()
        let name = "transferd_test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased()
        try execute(admin, "CREATE DATABASE \(name)")
        guard var components = URLComponents(string: admin) else { throw XCTSkip("bad TRANSFERD_TEST_POSTGRES") }
        components.path = "/" + name
        return components.string ?? admin
    }

    /// Runs one statement on a test database (to stage what another process would have done).
    /// (Through libpq itself: TestSupport is an ordinary target, built by `swift build -c release`
    /// too, so it may not import TransferCore's internals.)
    package static func execute(_ url: String, _ sql: String) throws {
        _ = try query(url, sql)
    }

    package struct TestStoreError: Error, CustomStringConvertible {
        package let message: String
        package var description: String { message }
    }

    /// Runs one statement (or several, without parameters) on a test database; each row's
    /// values as text (nil is NULL). Through libpq itself: TestSupport is an ordinary target,
    /// built by `swift build -c release` too, so it may not import TransferCore's internals.
    package static func query(_ url: String, _ sql: String) throws -> [[String?]] {
        guard let connection = PQconnectdb(url) else { throw TestStoreError(message: "out of memory") }
        defer { PQfinish(connection) }
        guard PQstatus(connection) == CONNECTION_OK else {
            throw TestStoreError(message: String(cString: PQerrorMessage(connection)))
        }
        let result = PQexec(connection, sql)
        defer { PQclear(result) }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            throw TestStoreError(message: String(cString: PQerrorMessage(connection)) + " in: " + sql)
        }
        return (0..<PQntuples(result)).map { row in
            (0..<PQnfields(result)).map { column in
                PQgetisnull(result, row, column) == 1 ? nil : String(cString: PQgetvalue(result, row, column))
            }
        }
    }

    /// The URL of `url` with another user and password (a role made for a test).
    package static func url(_ url: String, user: String, password: String) -> String {
        guard var components = URLComponents(string: url) else { return url }
        components.user = user
        components.password = password
        return components.string ?? url
    }

    /// The store's schema as an older transferd left it: the first `migrations.count` migrations
    /// (`PostgresQueueStore.migrations`, which the caller passes: test targets may read internals).
    package static func postgresSchema(_ url: String, migrations: [String]) throws {
        try execute(url, "CREATE TABLE transferd_schema (version INTEGER NOT NULL)")
        for (step, migration) in migrations.enumerated() {
            try execute(url, migration)
            try execute(url, "INSERT INTO transferd_schema (version) VALUES (\(step + 1))")
        }
    }

    /// One maker per store kind: each call of a maker opens the same store again (a
    /// second connection, or a second worker on PostgreSQL).
    /// Every store the contract suite (`QueueStoreContractTests`) runs each case on, each a
    /// factory of a fresh, empty store (opened again with another worker name, the same
    /// store). A new store joins the contract by adding its factory here.
    package static func all() throws -> [(name: String, open: (_ worker: String?) throws -> QueueStore)] {
        let path = NSTemporaryDirectory() + "/transferd-contract-\(UUID().uuidString).db"
        let postgres = try freshPostgresDatabase()
        let memory = MemoryQueueStore()
        return [
            ("sqlite", { _ in try SQLiteQueueStore(path: path) }),
            ("postgres", { worker in try PostgresQueueStore(url: postgres, worker: worker ?? "test-worker", leaseSeconds: 30) }),
            ("memory", { _ in memory }),
        ]
    }
}
