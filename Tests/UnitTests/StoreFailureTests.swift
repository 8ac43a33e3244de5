@testable import TransferCore
import XCTest

/// The one mapping from what libpq reports (SQLSTATE, or a failed connection's words) to
/// why a PostgreSQL store cannot be used, and the sentence each cause gets.
final class StoreFailureTests: XCTestCase {
    func testEachSQLStateAndConnectionMessageMapsToItsCause() {
        let table: [(state: String?, message: String, expected: StoreFailure?)] = [
            // Connections that failed: no SQLSTATE, libpq's words (as libpq 15 writes them).
            (nil, "connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  password authentication failed for user \"transferd\"",
             .wrongPassword),
            (nil, "connection to server at \"127.0.0.1\", port 5432 failed: fe_sendauth: no password supplied", .wrongPassword),
            (nil, "connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  database \"queue\" does not exist",
             .noDatabase("queue")),
            (nil, "connection to server at \"127.0.0.1\", port 9 failed: Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?",
             .unreachable("connection refused")),
            (nil, "could not translate host name \"db.invalid\" to address: Name or service not known", .unreachable("no such host")),
            (nil, "connection to server at \"10.1.2.3\", port 5432 failed: timeout expired", .unreachable("no answer within the connect timeout")),
            (nil, "connection to server on socket \"/run/postgresql/.s.PGSQL.5432\" failed: No such file or directory",
             .unreachable("no server socket there")),
            (nil, "connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  no pg_hba.conf entry for host \"127.0.0.1\", user \"x\", database \"q\", no encryption",
             .notAllowed("no pg_hba.conf entry for host \"127.0.0.1\", user \"x\", database \"q\", no encryption")),
            (nil, "connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  role \"ghost\" does not exist",
             .notAllowed("role \"ghost\" does not exist")),
            (nil, "connection to server at \"127.0.0.1\", port 5432 failed: FATAL:  permission denied for database \"queue\"",
             .noPrivilege(kind: "database", name: "queue")),
            (nil, "server closed the connection unexpectedly", nil),
            // TLS (libpq 15's words) and servers that are all standbys.
            (nil, "connection to server at \"127.0.0.1\", port 5432 failed: SSL error: certificate verify failed",
             .certificate(.untrusted)),
            (nil, "connection to server at \"127.0.0.1\", port 5432 failed: server certificate for \"localhost\" (and 1 other name) does not match host name \"db.example.test\"",
             .certificate(.wrongHost("db.example.test"))),
            (nil, "connection to server at \"127.0.0.1\", port 5432 failed: root certificate file \"/etc/ca.pem\" does not exist\nEither provide the file or change sslmode to disable server certificate verification.",
             .certificate(.noRootCertificate("/etc/ca.pem"))),
            (nil, "connection to server at \"127.0.0.1\", port 5432 failed: server does not support SSL, but SSL was required",
             .certificate(.serverWithoutTLS)),
            (nil, "connection to server at \"127.0.0.1\", port 5433 failed: session is read-only", .noWritableServer),
            (nil, "connection to server at \"127.0.0.1\", port 5432 failed: Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?\nconnection to server at \"127.0.0.1\", port 5433 failed: session is read-only",
             .noWritableServer),
            // Statements: by SQLSTATE.
            ("28P01", "FATAL:  password authentication failed for user \"transferd\"", .wrongPassword),
            ("3D000", "FATAL:  database \"queue\" does not exist", .noDatabase("queue")),
            ("42501", "ERROR:  permission denied for schema public\nLINE 1: CREATE TABLE IF NOT EXISTS transferd_schema",
             .noPrivilege(kind: "schema", name: "public")),
            ("42501", "ERROR:  permission denied for table transferd_jobs", .noPrivilege(kind: "table", name: "transferd_jobs")),
            ("42P07", "ERROR:  relation \"transferd_jobs\" already exists", .foreignTable("relation \"transferd_jobs\" already exists")),
            ("42P01", "ERROR:  relation \"transferd_files\" does not exist\nLINE 1: INSERT INTO transferd_files",
             .foreignTable("relation \"transferd_files\" does not exist")),
            ("42703", "ERROR:  column \"seq\" does not exist\nLINE 1: SELECT seq, spec", .foreignTable("column \"seq\" does not exist")),
            ("08006", "server closed the connection unexpectedly", nil),
            ("08001", "connection to server at \"127.0.0.1\", port 9 failed: Connection refused", .unreachable("connection refused")),
            // Not a store that cannot be used: the caller keeps the server's message.
            ("23505", "ERROR:  duplicate key value violates unique constraint", nil),
            ("40001", "ERROR:  could not serialize access", nil),
        ]
        for row in table {
            XCTAssertEqual(StoreFailure(sqlState: row.state, message: row.message), row.expected, "\(row.state ?? "nil"): \(row.message)")
        }
    }

    func testEachCauseIsOneSentenceWithTheStoreAndTheFix() {
        let store = "postgres://REDACTED@db.example:5432/queue"
        let table: [(StoreFailure, what: String, fix: String)] = [
            (.wrongPassword, "password authentication failed for user \"ops\"", "PGPASSWORD"),
            (.noDatabase("queue"), "database \"queue\" does not exist on the server of the queue store \(store)", "CREATE DATABASE queue OWNER ops"),
            (.unreachable("connection refused"), "cannot reach PostgreSQL for the queue store \(store) (connection refused)",
             "start PostgreSQL there"),
            (.noPrivilege(kind: "schema", name: "public"), "user \"ops\" may not create transferd's tables in schema public",
             "GRANT CREATE ON SCHEMA public TO ops"),
            (.noPrivilege(kind: "table", name: "transferd_jobs"), "user \"ops\" may not use table transferd_jobs",
             "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ops"),
            (.noPrivilege(kind: "database", name: "queue"), "may not use database queue", "GRANT CONNECT ON DATABASE queue TO ops"),
            (.foreignTable("column \"seq\" does not exist"), "transferd did not make (column \"seq\" does not exist)", "another database"),
            (.noQueueYet, "no queue at \(store) yet", "run `transferd run` or `transferd add` with --store to create it"),
            (.schemaOlder(found: 2, supported: 3), "schema version 2, older than the version 3", "upgrade it"),
            (.schemaNewer(found: 9, supported: 3), "schema version 9; this transferd understands up to 3", "use a newer transferd"),
            (.notAllowed("role \"ops\" does not exist"), "does not let user \"ops\" connect", "pg_hba.conf"),
            (.certificate(.untrusted), "TLS for the queue store \(store) was not accepted (its certificate is not signed by a CA in sslrootcert)",
             "name the CA"),
            (.certificate(.wrongHost("db.example")), "does not name the host db.example", "hostaddr=IP"),
            (.certificate(.noRootCertificate("/etc/ca.pem")), "the CA file /etc/ca.pem does not exist", "sslrootcert=FILE"),
            (.certificate(.serverWithoutTLS), "does not offer TLS", "turn on ssl"),
            (.noWritableServer, "no server of the queue store \(store) accepts writes", "target_session_attrs=read-write"),
        ]
        for (failure, what, fix) in table {
            let text = StoreProblem(store: store, user: "ops", failure: failure).description
            XCTAssertTrue(text.contains(what), "\(failure): \(text)")
            XCTAssertTrue(text.contains(" — " + fix) || text.split(separator: "—").last?.contains(fix) == true, "\(failure): \(text)")
            XCTAssertTrue(text.contains(store) || failure == .badURL, "\(failure) names the store: \(text)")
            XCTAssertFalse(text.contains("\n"), "one line: \(text)")
        }
        XCTAssertEqual(StoreProblem(store: "", user: "", failure: .badURL).description,
                       "the queue store URL in --store (or TRANSFERD_STORE) is not a valid PostgreSQL connection URL"
                           + " — write it as postgres://USER@HOST:PORT/DATABASE (the password from PGPASSWORD or ~/.pgpass)")
    }

    func testAStoreWithSeveralHostsShowsEachWithItsPort() {
        XCTAssertEqual(PostgresConnection.shownHosts(host: "a,b", port: "5432,5433"), "a:5432,b:5433")
        XCTAssertEqual(PostgresConnection.shownHosts(host: "a,b", port: "6432"), "a:6432,b:6432")
        XCTAssertEqual(PostgresConnection.shownHosts(host: nil, port: nil), "localhost")
        XCTAssertEqual(PostgresConnection.shownHosts(host: "db", port: "5432"), "db:5432")
    }

    func testTheServersWordsLoseLibpqsFrameAndTheStatementLines() {
        XCTAssertEqual(StoreFailure.serverWords("ERROR:  column \"seq\" does not exist\nLINE 1: SELECT seq\n        ^"),
                       "column \"seq\" does not exist")
        XCTAssertEqual(StoreFailure.serverWords("connection to server at \"h\", port 1 failed: FATAL:  role \"x\" does not exist"),
                       "role \"x\" does not exist")
    }
}
