import Foundation

/// Why a PostgreSQL queue store cannot be used, read from what libpq reports: the
/// statement's SQLSTATE, or for a connection that failed (libpq gives no SQLSTATE
/// there) the server's or libpq's words. The one place such errors are told apart:
/// a pure value, tested by a table (`StoreFailureTests`).
package enum StoreFailure: Equatable, Sendable {
    /// libpq cannot parse the URL (its text is not shown: it may hold the password anywhere).
    case badURL
    /// No server answered: refused, no such host, timed out. The reason, in a few words.
    case unreachable(String)
    /// 28P01: the password was wrong (or missing).
    case wrongPassword
    /// 28000: the server refuses this user from this host (no pg_hba.conf entry, no such role).
    case notAllowed(String)
    /// 3D000: the database in the URL does not exist.
    case noDatabase(String)
    /// 42501: the user may not create tables (`schema public`), or use a table, sequence or
    /// database (`table transferd_jobs`): the kind and the name.
    case noPrivilege(kind: String, name: String)
    /// 42P07 while creating, 42P01 / 42703 while using: tables with transferd's names that are
    /// not transferd's (or a schema missing a table it says it has). The server's words.
    case foreignTable(String)
    /// TLS was asked for (`sslmode=require`, `verify-ca`, `verify-full`) and did not come about:
    /// what libpq found wrong with the server's certificate, or with the server.
    case certificate(CertificateProblem)
    /// Every server the URL names is read-only (a standby), or refused the session attributes
    /// asked for (`target_session_attrs=read-write`): no primary to write the queue on.
    case noWritableServer
    /// A read-only command found no transferd schema: nothing was ever queued there.
    case noQueueYet
    /// A read-only command found an older schema, which it does not upgrade.
    case schemaOlder(found: Int, supported: Int)
    /// The schema is newer than this transferd understands.
    case schemaNewer(found: Int, supported: Int)

    /// The failure for an error libpq reported, or nil when it is none of these (a statement
    /// that failed for another reason: the caller keeps the server's message).
    package init?(sqlState: String?, message: String) {
        let text = Self.serverWords(message)
        switch sqlState {
        case "28P01": self = .wrongPassword
        case "28000": self = .notAllowed(text)
        case "3D000": self = .noDatabase(Self.quoted(after: "database ", in: text) ?? text)
        case "42501": self = Self.privilege(text)
        case "42P07", "42P01", "42703": self = .foreignTable(text)
        case let state? where state.hasPrefix("08") && !Self.unreachableReason(message).isEmpty:
            self = .unreachable(Self.unreachableReason(message))
        case nil:
            // A connection that failed: libpq's text, in English (the server's part in its
            // lc_messages; transferd's servers are set up in English).
            if let problem = CertificateProblem(message: message) {
                self = .certificate(problem)
            } else if message.contains("session is read-only") || message.contains("server is in hot standby mode")
                        || message.contains("is not the primary") {
                self = .noWritableServer
            } else if message.contains("password authentication failed") || message.contains("no password supplied") {
                self = .wrongPassword
            } else if message.contains("does not exist"), let name = Self.quoted(after: "database ", in: text),
                      text.hasPrefix("database ") {
                self = .noDatabase(name)
            } else if message.contains("permission denied for") {
                self = Self.privilege(text)
            } else if message.contains("no pg_hba.conf entry") || (message.contains("role \"") && message.contains("does not exist")) {
                self = .notAllowed(text)
            } else if !Self.unreachableReason(message).isEmpty {
                self = .unreachable(Self.unreachableReason(message))
            } else {
                return nil
            }
        default:
            return nil
        }
    }

    /// The server's own words: the first line, without libpq's "connection to server at …
    /// failed:" and the severity ("FATAL:  ", "ERROR:  ").
    static func serverWords(_ message: String) -> String {
        var text = message.split(separator: "\n", omittingEmptySubsequences: true).first.map(String.init) ?? message
        if text.hasPrefix("connection to server"), let range = text.range(of: " failed: ") {
            text = String(text[range.upperBound...])
        }
        for severity in ["FATAL:", "ERROR:", "PANIC:"] where text.hasPrefix(severity) {
            text = String(text.dropFirst(severity.count))
        }
        text = text.trimmingCharacters(in: .whitespaces)
        // The statement's position, which libpq appends: the statement itself is not shown.
        if let range = text.range(of: #" at character [0-9]+$"#, options: .regularExpression) {
            text.removeSubrange(range)
        }
        return text
    }

    /// The name in double quotes right after `prefix` (`database "x" does not exist`).
    static func quoted(after prefix: String, in text: String) -> String? {
        guard let start = text.range(of: prefix + "\"") else { return nil }
        let rest = text[start.upperBound...]
        guard let end = rest.firstIndex(of: "\"") else { return nil }
        return String(rest[..<end])
    }

    /// `permission denied for schema public` / `for table transferd_jobs` / `for database x`.
    static func privilege(_ text: String) -> StoreFailure {
        guard let range = text.range(of: "permission denied for ") else { return .noPrivilege(kind: "", name: text) }
        let words = text[range.upperBound...].split(separator: " ", maxSplits: 1).map(String.init)
        guard words.count == 2 else { return .noPrivilege(kind: "", name: words.first ?? text) }
        return .noPrivilege(kind: words[0], name: words[1].trimmingCharacters(in: CharacterSet(charactersIn: "\"")))
    }

    /// Why no server answered, in a few words; empty when the message says nothing of the kind.
    static func unreachableReason(_ message: String) -> String {
        let reasons = [("Connection refused", "connection refused"), ("could not translate host name", "no such host"),
                       ("Name or service not known", "no such host"), ("timeout expired", "no answer within the connect timeout"),
                       ("No route to host", "no route to host"), ("Network is unreachable", "network unreachable"),
                       ("No such file or directory", "no server socket there"), ("Connection timed out", "connection timed out")]
        return reasons.first { message.contains($0.0) }?.1 ?? ""
    }
}

/// A queue store that cannot be used: what happened, which store, and the fix. Said in
/// one sentence; never holds a password (`store` is the URL as `Redaction.url` shows it).
package struct StoreProblem: Error, Equatable, Sendable, CustomStringConvertible {
    /// The store's URL, redacted.
    package var store: String
    /// The role transferd connected as (libpq's default when the URL names none).
    package var user: String
    package var failure: StoreFailure

    package init(store: String, user: String, failure: StoreFailure) {
        self.store = store
        self.user = user
        self.failure = failure
    }

    /// What happened, naming the store.
    package var what: String {
        switch failure {
        case .badURL:
            return "the queue store URL in --store (or TRANSFERD_STORE) is not a valid PostgreSQL connection URL"
        case .unreachable(let reason):
            return "cannot reach PostgreSQL for the queue store \(store) (\(reason))"
        case .wrongPassword:
            return "PostgreSQL refused the queue store \(store): password authentication failed for user \"\(user)\""
        case .notAllowed(let words):
            return "PostgreSQL does not let user \"\(user)\" connect to the queue store \(store) (\(words))"
        case .noDatabase(let name):
            return "database \"\(name)\" does not exist on the server of the queue store \(store)"
        case .noPrivilege(let kind, let name):
            if kind == "schema" {
                return "user \"\(user)\" may not create transferd's tables in schema \(name) of the queue store \(store)"
            }
            return "user \"\(user)\" may not use \(kind.isEmpty ? "" : kind + " ")\(name) of the queue store \(store)"
        case .foreignTable(let words):
            return "the queue store \(store) holds tables named transferd_jobs or transferd_schema that transferd did not make"
                + " (\(words))"
        case .certificate(let problem):
            return "PostgreSQL's TLS for the queue store \(store) was not accepted (\(problem.what))"
        case .noWritableServer:
            return "no server of the queue store \(store) accepts writes (each one reachable is a read-only standby)"
        case .noQueueYet:
            return "no queue at \(store) yet"
        case .schemaOlder(let found, let supported):
            return "the queue at \(store) has schema version \(found), older than the version \(supported) this transferd reads"
                + " (a read-only command does not upgrade it)"
        case .schemaNewer(let found, let supported):
            return "the queue at \(store) has schema version \(found); this transferd understands up to \(supported)"
        }
    }

    /// How to fix it.
    package var fix: String {
        switch failure {
        case .badURL:
            return "write it as postgres://USER@HOST:PORT/DATABASE (the password from PGPASSWORD or ~/.pgpass)"
        case .unreachable:
            return "start PostgreSQL there, or correct the host and port in --store (or TRANSFERD_STORE)"
        case .wrongPassword:
            return "give the right password in PGPASSWORD or ~/.pgpass (or in the URL), or set it on the server"
                + " (ALTER ROLE \(user) PASSWORD '…')"
        case .notAllowed:
            return "create the role, or add a pg_hba.conf line for this host and user and reload PostgreSQL"
        case .noDatabase(let name):
            return "create it (CREATE DATABASE \(name) OWNER \(user)), or name an existing database in --store"
        case .noPrivilege(let kind, let name):
            switch kind {
            case "schema":
                return "let it create them (GRANT CREATE ON SCHEMA \(name) TO \(user)), or have a role that may run"
                    + " `transferd add` with --store once, then grant \(user) the rows (GRANT SELECT, INSERT, UPDATE, DELETE ON"
                    + " ALL TABLES IN SCHEMA \(name) TO \(user); GRANT USAGE ON ALL SEQUENCES IN SCHEMA \(name) TO \(user))"
            case "database":
                return "GRANT CONNECT ON DATABASE \(name) TO \(user)"
            default:
                return "as the tables' owner: GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO \(user);"
                    + " GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO \(user)"
            }
        case .foreignTable:
            return "point --store at another database (transferd changes nothing in these tables), or rename them there"
                + " if nothing uses them"
        case .certificate(let problem):
            return problem.fix
        case .noWritableServer:
            return "name the primary in --store, or list every host (postgres://USER@HOST1:PORT1,HOST2:PORT2/DATABASE"
                + "?target_session_attrs=read-write) so that after a failover the workers find the new primary"
        case .noQueueYet:
            return "run `transferd run` or `transferd add` with --store to create it"
        case .schemaOlder:
            return "run `transferd run` or `transferd add` with --store once to upgrade it (every worker then needs this"
                + " transferd), or look with the transferd that made it"
        case .schemaNewer:
            return "use a newer transferd"
        }
    }

    package var description: String { "\(what) — \(fix)" }
}

/// Why TLS to PostgreSQL failed, from libpq's words (it gives no code for these).
package enum CertificateProblem: Equatable, Sendable {
    /// The certificate is not signed by a CA in `sslrootcert` (verify-ca, verify-full).
    case untrusted
    /// The certificate does not name the host in the URL (verify-full).
    case wrongHost(String)
    /// The `sslrootcert` file (by default ~/.postgresql/root.crt) does not exist.
    case noRootCertificate(String)
    /// The server does not speak TLS, and the URL requires it.
    case serverWithoutTLS

    init?(message: String) {
        if message.contains("certificate verify failed") {
            self = .untrusted
        } else if let name = StoreFailure.quoted(after: "does not match host name ", in: message) {
            self = .wrongHost(name)
        } else if let path = StoreFailure.quoted(after: "root certificate file ", in: message) {
            self = .noRootCertificate(path)
        } else if message.contains("server does not support SSL") {
            self = .serverWithoutTLS
        } else {
            return nil
        }
    }

    var what: String {
        switch self {
        case .untrusted: return "its certificate is not signed by a CA in sslrootcert"
        case .wrongHost(let name): return "its certificate does not name the host \(name)"
        case .noRootCertificate(let path): return "the CA file \(path) does not exist"
        case .serverWithoutTLS: return "the server does not offer TLS, and sslmode requires it"
        }
    }

    var fix: String {
        switch self {
        case .untrusted:
            return "name the CA that signed the server's certificate with sslrootcert=FILE in the URL"
        case .wrongHost:
            return "connect by a name the certificate holds, or give that name as the host and the address as"
                + " hostaddr=IP in the URL"
        case .noRootCertificate:
            return "put the CA's certificate there, or name it with sslrootcert=FILE in the URL"
        case .serverWithoutTLS:
            return "turn on ssl in the server's postgresql.conf, or lower sslmode in the URL"
        }
    }
}
