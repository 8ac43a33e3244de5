import Foundation
import TestSupport
@testable import TransferCore
import XCTest

/// What an operator sees when a queue store cannot be used, or a command runs away from
/// a queue folder: one sentence (what, which store, the fix), never a cut SQL fragment or
/// a raw NSError, the same exit code (2) for the same cause from every command, and
/// read-only commands that change nothing.
final class StoreErrorTests: XCTestCase {
    /// The binary with neither TRANSFERD_STORE nor PGPASSWORD from outside.
    func transferd(_ arguments: [String], in directory: String) throws -> TransferdProcess.Result {
        var environment = ProcessInfo.processInfo.environment
        environment["TRANSFERD_STORE"] = nil
        environment["PGPASSWORD"] = nil
        return try TransferdProcess.run(arguments, directory: directory, environment: environment)
    }

    /// One line on stderr, saying what and how to fix it, with none of the raw texts.
    func assertSentence(_ result: TransferdProcess.Result, _ what: String, code: Int32 = 2, contains: [String],
                        secrets: [String] = [], file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(result.status, code, "\(what): \(result.stderr)", file: file, line: line)
        let text = result.stderr
        for part in contains {
            XCTAssertTrue(text.contains(part), "\(what): expected '\(part)' in: \(text)", file: file, line: line)
        }
        for raw in ["ERROR:", "FATAL:", " in: ", "LINE 1", "NSCocoaErrorDomain", "Error Domain="] + secrets {
            XCTAssertFalse(text.contains(raw), "\(what): '\(raw)' shown: \(text)", file: file, line: line)
        }
        XCTAssertTrue(text.contains(" — "), "\(what): no fix given: \(text)", file: file, line: line)
        XCTAssertEqual(text.filter { $0 == "\n" }.count, 1, "\(what): one line: \(text)", file: file, line: line)
    }

    func entries(_ folder: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []).sorted()
    }

    // MARK: commands away from a queue folder

    func testAddRetryCancelAndStatusWithAStoreWorkFromAnyFolder() throws {
        let store = try TestStores.freshPostgresDatabase()
        let folder = try scratchDirectory()
        let add = try transferd(["add", "http://127.0.0.1:9/a.bin", "http://127.0.0.1:9/b.bin", "--store", store], in: folder)
        XCTAssertEqual(add.status, 0, add.stderr)
        XCTAssertEqual(add.stdout, "2 jobs added to the shared store\n")
        XCTAssertEqual(entries(folder), [], "add --store writes nothing locally")

        try TestStores.execute(store, "UPDATE transferd_jobs SET state = 'failed', last_error = 'refused'")
        let retry = try transferd(["retry", "--failed", "--store", store], in: folder)
        XCTAssertEqual(retry.status, 0, retry.stderr)
        XCTAssertEqual(retry.stdout, "2 jobs queued again\n")
        XCTAssertEqual(retry.stderr, "")
        XCTAssertEqual(try TestStores.query(store, "SELECT DISTINCT state FROM transferd_jobs"), [["queued"]])

        let id = try XCTUnwrap(try TestStores.query(store, "SELECT id FROM transferd_jobs ORDER BY seq").first?.first ?? nil)
        try TestStores.execute(store, "UPDATE transferd_jobs SET state = 'failed' WHERE id = '\(id)'")
        let one = try transferd(["retry", id, "--store", store], in: folder)
        XCTAssertEqual(one.status, 0, one.stderr)
        XCTAssertEqual(one.stdout, "1 job queued again\n")
        let cancel = try transferd(["cancel", id, "--store", store], in: folder)
        XCTAssertEqual(cancel.status, 0, cancel.stderr)
        let status = try transferd(["status", "--store", store], in: folder)
        XCTAssertEqual(status.status, 0, status.stderr)
        XCTAssertTrue(status.stdout.contains("2 jobs"), status.stdout)
        XCTAssertEqual(entries(folder), [], "nothing written locally")

        // The commands that do need a queue folder say so, and why.
        for command in ["ingest", "run"] {
            let result = try transferd([command, "--store", store], in: folder)
            assertSentence(result, command, contains: ["\(folder)/queue.d is not a folder", "mkdir -p \(folder)/queue.d",
                                                        "job files"])
        }
        XCTAssertEqual(entries(folder), [])
    }

    /// A result file that cannot be written after the jobs were queued again: the success is
    /// said, then one sentence (not the NSError) for the file, exit 4.
    func testARetryWhoseResultFileCannotBeWrittenSaysSoInASentence() throws {
        let store = try TestStores.freshPostgresDatabase()
        let folder = try scratchDirectory()
        XCTAssertEqual(try transferd(["add", "http://127.0.0.1:9/a.bin", "http://127.0.0.1:9/b.bin", "--store", store], in: folder).status, 0)
        try TestStores.execute(store, "UPDATE transferd_jobs SET state = 'failed', last_error = 'refused'")
        let rows = try TestStores.query(store, "SELECT id, source_file FROM transferd_jobs ORDER BY seq")
        let id = try XCTUnwrap(rows.first?[0] ?? nil)
        let source = try XCTUnwrap(rows.first?[1] ?? nil)
        let name = source.hasSuffix(".json") ? source : source + ".json"
        // failed/NAME.json is a folder: the other job's failure cannot be written there.
        try FileManager.default.createDirectory(atPath: folder + "/queue.d/failed/" + name, withIntermediateDirectories: true)
        let retry = try transferd(["retry", id, "--store", store], in: folder)
        XCTAssertEqual(retry.stdout, "1 job queued again\n")
        assertSentence(retry, "retry", code: 4, contains: ["queue.d/failed/\(name)", "queued again"])
    }

    // MARK: PostgreSQL errors, the same from every command

    /// Every command that takes --store, run in a folder with a queue folder.
    func commands(_ store: String) -> [[String]] {
        [["status"], ["status", "--json"], ["add", "http://127.0.0.1:9/a.bin"], ["ingest"], ["retry", "--failed"],
         ["cancel", "some-id"], ["run"]].map { $0 + ["--store", store] }
    }

    func queueFolder() throws -> String {
        let folder = try scratchDirectory()
        try FileManager.default.createDirectory(atPath: folder + "/queue.d", withIntermediateDirectories: true)
        return folder
    }

    func testAForeignTransferdJobsTableIsNamedAndLeftAlone() throws {
        let store = try TestStores.freshPostgresDatabase()
        try TestStores.execute(store, "CREATE TABLE transferd_jobs (id INTEGER, name TEXT)")
        try TestStores.execute(store, "INSERT INTO transferd_jobs VALUES (1, 'theirs')")
        let folder = try queueFolder()
        let shown = String(store.drop { $0 != "@" }.dropFirst())
        for arguments in commands(store) {
            assertSentence(try transferd(arguments, in: folder), arguments.joined(separator: " "),
                           contains: ["transferd_jobs", "transferd did not make", shown, "another database"])
        }
        XCTAssertEqual(try TestStores.query(store, "SELECT to_regclass('transferd_schema')::text"), [[nil]], "nothing created")
        XCTAssertEqual(try TestStores.query(store, "SELECT id, name FROM transferd_jobs"), [["1", "theirs"]], "their table is left alone")

        // A schema table that says transferd's, over a jobs table that is not.
        let other = try TestStores.freshPostgresDatabase()
        try TestStores.execute(other, "CREATE TABLE transferd_schema (version INTEGER NOT NULL)")
        try TestStores.execute(other, "INSERT INTO transferd_schema VALUES (\(PostgresQueueStore.schemaVersion))")
        try TestStores.execute(other, "CREATE TABLE transferd_jobs (id INTEGER, name TEXT)")
        assertSentence(try transferd(["status", "--store", other], in: folder), "status",
                       contains: ["transferd_jobs", "transferd did not make", "column \"state\" does not exist", "another database"])
        assertSentence(try transferd(["add", "http://127.0.0.1:9/a.bin", "--store", other], in: folder), "add",
                       contains: ["transferd_jobs", "transferd did not make", "relation \"transferd_files\" does not exist",
                                  "another database"])
    }

    func testARoleWithoutCreateIsToldWhatToGrantAndWorksOnceGranted() throws {
        let admin = try TestStores.postgresURL()
        let store = try TestStores.freshPostgresDatabase()
        let role = "transferd_role_" + UUID().uuidString.prefix(8).lowercased()
        try TestStores.execute(admin, "CREATE ROLE \(role) LOGIN PASSWORD 'role-secret-4711'")
        try TestStores.execute(store, "REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        let limited = TestStores.url(store, user: role, password: "role-secret-4711")
        let folder = try queueFolder()
        for arguments in commands(limited) where arguments[0] != "status" {
            assertSentence(try transferd(arguments, in: folder), arguments.joined(separator: " "),
                           contains: ["user \"\(role)\" may not create", "GRANT CREATE ON SCHEMA public TO \(role)"],
                           secrets: ["role-secret-4711"])
        }
        // Reading needs no CREATE: there is just no queue yet.
        assertSentence(try transferd(["status", "--store", limited], in: folder), "status",
                       contains: ["no queue at", "transferd run"], secrets: ["role-secret-4711"])

        // An owner makes the queue and grants the role its rows: the role works without CREATE.
        XCTAssertEqual(try transferd(["add", "http://127.0.0.1:9/a.bin", "--store", store], in: folder).status, 0)
        try TestStores.execute(store, "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO \(role)")
        try TestStores.execute(store, "GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO \(role)")
        let add = try transferd(["add", "http://127.0.0.1:9/b.bin", "--store", limited], in: folder)
        XCTAssertEqual(add.status, 0, add.stderr)
        let status = try transferd(["status", "--store", limited], in: folder)
        XCTAssertEqual(status.status, 0, status.stderr)
        XCTAssertTrue(status.stdout.contains("2 jobs"), status.stdout)

        // Without rights on the tables: which grant is missing.
        try TestStores.execute(store, "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM \(role)")
        for arguments in [["status", "--store", limited], ["add", "http://127.0.0.1:9/c.bin", "--store", limited]] {
            assertSentence(try transferd(arguments, in: folder), arguments[0],
                           contains: ["user \"\(role)\" may not use table", "GRANT SELECT, INSERT, UPDATE, DELETE"],
                           secrets: ["role-secret-4711"])
        }
    }

    func testConnectionProblemsAreOneSentenceWithTheSameCodeFromEveryCommand() throws {
        let store = try TestStores.freshPostgresDatabase()
        guard var wrong = URLComponents(string: store), var missing = URLComponents(string: store) else { return XCTFail("bad URL") }
        wrong.password = "wrong-password-0815"
        missing.path = "/no_such_database_here"
        let password = URLComponents(string: store)?.password ?? "no password"
        let refused = "postgres://transferd:refused-secret-4711@127.0.0.1:9/postgres"
        let folder = try queueFolder()
        let cases: [(url: String, says: [String])] = [
            (wrong.string!, ["password authentication failed for user \"transferd\"", "PGPASSWORD"]),
            (missing.string!, ["database \"no_such_database_here\" does not exist", "CREATE DATABASE no_such_database_here"]),
            (refused, ["cannot reach PostgreSQL", "127.0.0.1:9", "connection refused"]),
        ]
        for (url, says) in cases {
            for arguments in commands(url) {
                assertSentence(try transferd(arguments, in: folder), arguments.joined(separator: " "), contains: says,
                               secrets: ["wrong-password-0815", "refused-secret-4711", password])
            }
        }
    }

    /// The test server speaks TLS with the test CA's certificate (for localhost and 127.0.0.1):
    /// `sslmode=verify-full` with that CA works, and each way it can fail is one sentence
    /// naming the cause and the fix, from every command.
    func testVerifyFullWorksWithTheRightCAAndRefusesEveryOtherCertificate() throws {
        let store = try TestStores.freshPostgresDatabase()
        let environment = ProcessInfo.processInfo.environment
        let ca = try XCTUnwrap(environment["TRANSFERD_TEST_POSTGRES_CA"], "scripts/servers sets TRANSFERD_TEST_POSTGRES_CA")
        let servers = try XCTUnwrap(environment["TRANSFERD_TEST_SERVERS"])
        func with(_ items: [String: String], host: String? = nil) throws -> String {
            var components = try XCTUnwrap(URLComponents(string: store))
            components.queryItems = items.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) }
            if let host { components.host = host }
            return try XCTUnwrap(components.string)
        }
        let folder = try queueFolder()
        let verified = try with(["sslmode": "verify-full", "sslrootcert": ca])
        let add = try transferd(["add", "http://127.0.0.1:9/a.bin", "--store", verified], in: folder)
        XCTAssertEqual(add.status, 0, add.stderr)
        let status = try transferd(["status", "--json", "--store", verified], in: folder)
        XCTAssertEqual(status.status, 0, status.stderr)
        XCTAssertTrue(status.stdout.contains("\"state\":\"queued\""), status.stdout)

        let password = URLComponents(string: store)?.password ?? "no password"
        let cases: [(url: String, says: [String])] = [
            // The server's own certificate is no CA: nothing vouches for it.
            (try with(["sslmode": "verify-full", "sslrootcert": servers + "/certs/server.pem"]),
             ["TLS for the queue store", "not signed by a CA in sslrootcert", "sslrootcert=FILE"]),
            (try with(["sslmode": "verify-full", "sslrootcert": ca, "hostaddr": "127.0.0.1"], host: "db.example.test"),
             ["does not name the host db.example.test", "hostaddr=IP"]),
            (try with(["sslmode": "verify-ca", "sslrootcert": "/nonexistent/transferd-ca.pem"]),
             ["the CA file /nonexistent/transferd-ca.pem does not exist", "sslrootcert=FILE"]),
        ]
        for (url, says) in cases {
            for arguments in commands(url) {
                assertSentence(try transferd(arguments, in: folder), arguments.joined(separator: " "), contains: says,
                               secrets: [password])
            }
        }
    }

    // MARK: read-only commands change nothing

    func testStatusNeitherCreatesNorMigratesTheSchema() throws {
        let store = try TestStores.freshPostgresDatabase()
        let folder = try scratchDirectory()
        for arguments in [["status", "--store", store], ["status", "--json", "--store", store]] {
            assertSentence(try transferd(arguments, in: folder), arguments.joined(separator: " "),
                           contains: ["no queue at", "yet", "`transferd run` or `transferd add` with --store"])
        }
        XCTAssertEqual(try TestStores.query(store, "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'transferd%'"), [["0"]])

        let older = try TestStores.freshPostgresDatabase()
        try TestStores.postgresSchema(older, migrations: Array(PostgresQueueStore.migrations.prefix(2)))
        assertSentence(try transferd(["status", "--store", older], in: folder), "status of an older schema",
                       contains: ["schema version 2", "transferd run"])
        XCTAssertEqual(try TestStores.query(older, "SELECT max(version) FROM transferd_schema"), [["2"]], "not migrated")
        XCTAssertEqual(entries(folder), [])
    }

    func testStatusOfAQueueFolderNeverRunCreatesNothing() throws {
        let folder = try scratchDirectory()
        let queue = folder + "/q"
        try FileManager.default.createDirectory(atPath: queue, withIntermediateDirectories: true)
        let status = try transferd(["status", "--queue", queue], in: folder)
        XCTAssertEqual(status.status, 0, status.stderr)
        XCTAssertTrue(status.stdout.contains("0 jobs"), status.stdout)
        let json = try transferd(["status", "--queue", queue, "--json"], in: folder)
        XCTAssertEqual(json.status, 0, json.stderr)
        XCTAssertEqual(json.stdout, "")
        XCTAssertEqual(entries(queue), [], "status made nothing in the queue folder")
    }
}
