import CPostgres
import Foundation

/// One libpq connection, used under the store's lock. Parameters are always
/// sent apart from the SQL text, in text format; results come back as text and
/// are read through `PostgresRow`.
///
/// Each statement is prepared on the server the first time this connection
/// runs it (`PQprepare`) and run by name after that (`PQexecPrepared`): the
/// store's statements are a fixed set, and parsing and planning a claim again
/// on every call was most of the server's time per claim (0.40 of 0.56 ms,
/// measured from `log_min_duration_statement`'s parse and bind lines).
final class PostgresConnection {
    private var handle: OpaquePointer?
    /// The statements prepared on this connection's server session, by SQL text; emptied when
    /// the connection is renewed (a new session has none).
    private var prepared: [String: String] = [:]
    /// Statements prepared at most: past that, statements run unprepared (a text made from
    /// data by mistake must not grow the server's session without bound).
    static let preparedLimit = 256
    /// Where, with any password left out: for errors.
    let shownTarget: String
    /// The store's URL as `Redaction.url` shows it: for the sentences of `StoreProblem`.
    let shownURL: String
    /// The role this connection logs in as (libpq's default when the URL names none).
    private(set) var user: String

    /// `url` is a libpq connection URI (postgres:// or postgresql://). Credentials
    /// come from it, `PGPASSWORD` or `~/.pgpass`, as libpq reads them.
    init(url: String) throws {
        // libpq parses the URL (multi-host lists, percent-encoding and options that Foundation's URL
        // does not take); its password becomes a registered secret before anything can print it,
        // and what errors show is built from the other fields.
        var parseError: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(url, &parseError) else {
            // libpq's message may quote the URL, password and all: not shown.
            PQfreemem(parseError)
            throw StoreError.unusable(StoreProblem(store: "", user: "", failure: .badURL))
        }
        var fields: [String: String] = [:]
        var option = options
        while let keyword = option.pointee.keyword {
            if let value = option.pointee.val { fields[String(cString: keyword)] = String(cString: value) }
            option += 1
        }
        PQconninfoFree(options)
        if let password = fields["password"], !password.isEmpty { Redaction.registerSecret(password) }
        shownURL = Redaction.url(string: url)
        user = fields["user"] ?? ""
        shownTarget = "postgres://" + (fields["user"].map { $0 + "@" } ?? "")
            + Self.shownHosts(host: fields["host"], port: fields["port"]) + "/" + (fields["dbname"] ?? "")
        // Give up on an unreachable server after 10 s, and notice a dead peer (a cut network, a
        // host that vanished) by TCP keepalives within about 25 s instead of waiting forever.
        // The URL's own settings come last and win.
        let keywords = ["connect_timeout", "keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "dbname"]
        let values = ["10", "1", "10", "5", "3", url]
        handle = Self.withCStrings(keywords) { keywordPointers in
            Self.withCStrings(values) { valuePointers in PQconnectdbParams(keywordPointers, valuePointers, 1) }
        }
        if user.isEmpty, let handle, let name = PQuser(handle) { user = String(cString: name) }
        guard let handle, PQstatus(handle) == CONNECTION_OK else {
            let message = handle.map { Self.message(of: $0) } ?? "out of memory"
            PQfinish(handle)
            self.handle = nil
            // libpq gives no SQLSTATE for a connection that failed: told apart by its words.
            if let problem = problem(sqlState: nil, message: message) { throw problem }
            throw StoreError.postgres(target: shownTarget, message: message,
                                      fix: "check that PostgreSQL runs there and that the user, password and database are right")
        }
        // Notices (a table that already exists, say) are not the user's business.
        PQsetNoticeProcessor(handle, { _, _ in }, nil)
        try setUpSession()
    }

    /// Plans stay made for each call's values: a generic plan, which PostgreSQL adopts for a
    /// prepared statement after five calls, reads a batch's rows through the worker and state
    /// indexes instead of by id, and walked every dead row version of the run (a 10,000-job run:
    /// claims 0.16 -> 1.5 ms, batch updates 2 -> 5.5 ms). Preparing still saves the parse.
    ///
    /// Behind a pooler in transaction mode (PgBouncer's `pool_mode = transaction`), each
    /// transaction may run on another server session, and what one session is left with
    /// reaches other clients: nothing of the session is relied on or left behind there. Such a
    /// connection is told by the server's process id, which is not the one the connection was
    /// given at its start (a pooler answers the start itself); it then runs every statement
    /// unnamed (planned for each call's values, as the plan mode asks) and sets nothing. The
    /// store's locks are transaction-scoped already.
    private func setUpSession() throws {
        guard let handle else { return }
        let result = PQexec(handle, "SELECT pg_backend_pid()")
        defer { PQclear(result) }
        let server = PQresultStatus(result) == PGRES_TUPLES_OK && PQntuples(result) == 1
            ? Int32(String(cString: PQgetvalue(result, 0, 0))) : nil
        pooled = server != PQbackendPID(handle)
        if !pooled { try executeScript("SET plan_cache_mode = force_custom_plan") }
    }

    /// Whether a pooler stands between this connection and PostgreSQL (see `setUpSession`):
    /// no named statement, no session setting.
    private(set) var pooled = false

    deinit { PQfinish(handle) }

    /// The error for a failure `StoreFailure` knows (one sentence with the store and the
    /// fix), or nil for any other.
    func problem(sqlState: String?, message: String) -> StoreError? {
        StoreFailure(sqlState: sqlState, message: message).map { .unusable(StoreProblem(store: shownURL, user: user, failure: $0)) }
    }

    /// `StoreError.unusable` for `failure` at this store.
    func problem(_ failure: StoreFailure) -> StoreError {
        .unusable(StoreProblem(store: shownURL, user: user, failure: failure))
    }

    /// `host:port` for each server the URL lists, comma-separated as libpq takes them
    /// (`h1:5432,h2:5433`); one port serves every host when only one is given.
    static func shownHosts(host: String?, port: String?) -> String {
        let hosts = (host ?? "localhost").split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        let ports = (port ?? "").split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        return hosts.enumerated().map { index, name in
            let port = ports.count == hosts.count ? ports[index] : ports.first ?? ""
            return (name.isEmpty ? "localhost" : name) + (port.isEmpty ? "" : ":" + port)
        }.joined(separator: ",")
    }

    /// A NULL-terminated array of C strings, alive while `body` runs.
    private static func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>) -> R) -> R {
        let copies = strings.map { strdup($0) }
        defer { copies.forEach { free($0) } }
        let pointers: [UnsafePointer<CChar>?] = copies.map { $0.map { UnsafePointer($0) } } + [nil]
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }

    /// Whether the connection broke (the server restarted, a failover, the network): the
    /// statement can be tried again on a new one.
    fileprivate var isBroken: Bool { abandonedPipeline || (handle.map { PQstatus($0) != CONNECTION_OK } ?? true) }
    /// A pipeline was left with answers unread (a send failed, an answer ended early): the
    /// session is unusable until renewed, which the callers' retry does.
    private var abandonedPipeline = false
    fileprivate var inTransaction = false

    /// The server's message alone (no severity, position or statement lines), when the result has one.
    private static func primaryMessage(of result: OpaquePointer?) -> String? {
        result.flatMap { PQresultErrorField($0, Int32(UInt8(ascii: "M"))) }.map { String(cString: $0) }
    }

    private static func message(of handle: OpaquePointer) -> String {
        // libpq's messages name host, port, user and database, never the password; scrubbed all the same.
        Redaction.scrub(String(cString: PQerrorMessage(handle)).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Runs one statement with `$1…` parameters (nil is NULL); returns its rows.
    @discardableResult
    func query(_ sql: String, _ parameters: [String?] = []) throws -> [PostgresRow] {
        let result = try run(sql, parameters)
        defer { PQclear(result) }
        return Self.rows(of: result)
    }

    private static func rows(of result: OpaquePointer?) -> [PostgresRow] {
        let rows = PQntuples(result)
        let columns = PQnfields(result)
        var out: [PostgresRow] = []
        out.reserveCapacity(Int(rows))
        for row in 0..<rows {
            var values: [String?] = []
            values.reserveCapacity(Int(columns))
            for column in 0..<columns {
                values.append(PQgetisnull(result, row, column) == 1 ? nil : String(cString: PQgetvalue(result, row, column)))
            }
            out.append(PostgresRow(values: values))
        }
        return out
    }

    /// Runs a statement and returns how many rows it changed.
    @discardableResult
    func execute(_ sql: String, _ parameters: [String?] = []) throws -> Int {
        let result = try run(sql, parameters)
        defer { PQclear(result) }
        return Int(String(cString: PQcmdTuples(result))) ?? 0
    }

    /// Runs several statements without parameters (a schema migration).
    func executeScript(_ sql: String) throws {
        guard let handle else { throw StoreError.postgres(target: shownTarget, message: "not connected", fix: "") }
        let result = PQexec(handle, sql)
        defer { PQclear(result) }
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            let message = result.map { String(cString: PQresultErrorMessage($0)) } ?? Self.message(of: handle)
            let state = result.flatMap { PQresultErrorField($0, Int32(UInt8(ascii: "C"))) }.map { String(cString: $0) }
            // A statement's failure is told apart by its SQLSTATE only (a connection lost mid-statement
            // stays a `.postgres` error: the run's "database went away").
            if let state, let problem = problem(sqlState: state, message: Redaction.scrub(Self.primaryMessage(of: result) ?? message)) {
                throw problem
            }
            throw StoreError.postgres(target: shownTarget, message: Redaction.scrub(message.trimmingCharacters(in: .whitespacesAndNewlines)),
                                      fix: "")
        }
    }

    private func run(_ sql: String, _ parameters: [String?]) throws -> OpaquePointer? {
        do {
            return try runOnce(sql, parameters)
        } catch let error as StoreError where isBroken && !inTransaction {
            // Outside a transaction a statement stands alone: once more, on a new connection.
            try reconnect(after: error)
            return try runOnce(sql, parameters)
        }
    }

    /// A new session in place of a broken one: its prepared statements are gone with the old.
    private func renew(_ handle: OpaquePointer) {
        PQreset(handle)
        prepared.removeAll()
        abandonedPipeline = false
        if PQstatus(handle) == CONNECTION_OK { try? setUpSession() }
    }

    private func runOnce(_ sql: String, _ parameters: [String?]) throws -> OpaquePointer? {
        guard let handle else { throw StoreError.postgres(target: shownTarget, message: "not connected", fix: "") }
        let name = try statementName(for: sql, parameterCount: parameters.count, on: handle)
        let result = Self.withParameters(parameters) { count, values -> OpaquePointer? in
            if let name { return PQexecPrepared(handle, name, count, values, nil, nil, 0) }
            return PQexecParams(handle, sql, count, nil, values, nil, nil, 0)
        }
        return try checked(result, sql: sql, on: handle)
    }

    /// `parameters` as libpq takes them (nil is NULL), alive while `body` runs.
    private static func withParameters<R>(_ parameters: [String?],
                                          _ body: (Int32, UnsafePointer<UnsafePointer<CChar>?>?) -> R) -> R {
        var cStrings: [UnsafeMutablePointer<CChar>?] = parameters.map { $0.map { strdup($0) } ?? nil }
        defer { for pointer in cStrings { free(pointer) } }
        return cStrings.withUnsafeMutableBufferPointer { buffer in
            buffer.withMemoryRebound(to: UnsafePointer<CChar>?.self) { body(Int32(parameters.count), $0.baseAddress) }
        }
    }

    /// The server-side name of `sql`, prepared now if this session has not seen it; nil past
    /// `preparedLimit` (run unprepared).
    private func statementName(for sql: String, parameterCount: Int, on handle: OpaquePointer) throws -> String? {
        if let name = prepared[sql] { return name }
        guard !pooled, prepared.count < Self.preparedLimit else { return nil }
        let name = "transferd_\(prepared.count)"
        let result = PQprepare(handle, name, sql, Int32(parameterCount), nil)
        PQclear(try checked(result, sql: sql, on: handle))
        prepared[sql] = name
        return name
    }

    /// `result` if it succeeded; otherwise it is freed and the server's message thrown.
    private func checked(_ result: OpaquePointer?, sql: String, on handle: OpaquePointer) throws -> OpaquePointer? {
        let status = PQresultStatus(result)
        guard status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK else {
            let message = result.map { String(cString: PQresultErrorMessage($0)) } ?? Self.message(of: handle)
            let state = result.flatMap { PQresultErrorField($0, Int32(UInt8(ascii: "C"))) }.map { String(cString: $0) }
            let primary = Self.primaryMessage(of: result)
            PQclear(result)
            // A statement's failure is told apart by its SQLSTATE only (a connection lost mid-statement
            // stays a `.postgres` error: the run's "database went away").
            if let state, let problem = problem(sqlState: state, message: Redaction.scrub(primary ?? message)) {
                throw problem
            }
            throw StoreError.postgres(target: shownTarget,
                                      message: Redaction.scrub(message.trimmingCharacters(in: .whitespacesAndNewlines))
                                          + " in: \(sql.prefix(60))",
                                      fix: "", sqlState: state)
        }
        return result
    }

    /// Sends `statements` in one round trip (libpq's pipeline mode) and returns each one's rows.
    /// After a failure the server skips the rest up to the pipeline's end; the first error is thrown
    /// once every result was read.
    fileprivate func pipeline(_ statements: [PostgresStatement]) throws -> [[PostgresRow]] {
        guard let handle else { throw StoreError.postgres(target: shownTarget, message: "not connected", fix: "") }
        // Prepared before the pipeline starts (a prepare waits for its answer, which a pipeline
        // does not allow).
        let names = try statements.map { try statementName(for: $0.sql, parameterCount: $0.parameters.count, on: handle) }
        guard PQenterPipelineMode(handle) == 1 else { throw failure("could not start a pipeline", on: handle) }
        // Still in the pipeline after an early throw (answers not read): the session is given
        // up (`isBroken`), not used for statements it would refuse.
        defer { if PQexitPipelineMode(handle) != 1 { abandonedPipeline = true } }
        for (statement, name) in zip(statements, names) {
            let sent = Self.withParameters(statement.parameters) { count, values -> Int32 in
                if let name { return PQsendQueryPrepared(handle, name, count, values, nil, nil, 0) }
                return PQsendQueryParams(handle, statement.sql, count, nil, values, nil, nil, 0)
            }
            guard sent == 1 else { throw failure("could not send a statement", on: handle) }
        }
        guard PQpipelineSync(handle) == 1 else { throw failure("could not send a statement", on: handle) }
        var out: [[PostgresRow]] = []
        var firstError: Error?
        for statement in statements {
            guard let result = PQgetResult(handle) else { throw failure("the server's answers ended early", on: handle) }
            if PQresultStatus(result) == PGRES_PIPELINE_ABORTED {
                PQclear(result)
                out.append([])
            } else {
                do {
                    let checkedResult = try checked(result, sql: statement.sql, on: handle)
                    out.append(Self.rows(of: checkedResult))
                    PQclear(checkedResult)
                } catch {
                    firstError = firstError ?? error
                    out.append([])
                }
            }
            // Each statement's results end with a null.
            while let extra = PQgetResult(handle) { PQclear(extra) }
        }
        // The pipeline's end.
        while let result = PQgetResult(handle) {
            let status = PQresultStatus(result)
            PQclear(result)
            if status == PGRES_PIPELINE_SYNC { break }
        }
        if let firstError { throw firstError }
        return out
    }

    private func failure(_ what: String, on handle: OpaquePointer) -> StoreError {
        StoreError.postgres(target: shownTarget, message: what + ": " + Self.message(of: handle), fix: "")
    }

    /// How long a broken connection is tried again before the store gives up, in seconds
    /// (`run --store-outage`): a restart of PostgreSQL takes a fraction of a second, a failover
    /// or a maintenance stop minutes.
    var outageLimit: TimeInterval = 300

    /// Renews a broken connection, trying again with a growing pause (0.1 s doubling to 5 s)
    /// until `outageLimit` has passed since the break, and throws then. The caller holds the
    /// store's lock meanwhile, so the store's other callers wait for it rather than each
    /// finding the server gone. A new session has no prepared statements (`renew` forgets them);
    /// the store's advisory locks are transaction-scoped, so none is left to take again.
    fileprivate func reconnect(after error: Error) throws {
        guard let handle else { throw error }
        let started = LeaseClock.now()
        var pause = 0.1
        while true {
            renew(handle)
            if PQstatus(handle) == CONNECTION_OK { return }
            let waited = LeaseClock.now() - started
            guard waited < outageLimit else {
                throw StoreError.postgres(
                    target: shownTarget,
                    message: "unreachable for \(Int(waited)) s, the most a worker waits (\(Self.message(of: handle)))",
                    fix: "check that PostgreSQL runs and accepts connections, then run again; "
                        + "to wait longer through an outage, give run --store-outage SECONDS")
            }
            usleep(UInt32(min(pause, outageLimit - waited) * 1_000_000))
            pause = min(pause * 2, 5)
        }
    }

    /// Runs `body` in a transaction: committed when it returns, rolled back when it throws.
    /// A transaction whose connection breaks is run again, once, on a new connection (nothing
    /// of it was committed); `body` must be safe to run twice.
    func transaction<R>(_ body: () throws -> R) throws -> R {
        do {
            return try transactionOnce(body)
        } catch let error as StoreError where isBroken {
            try reconnect(after: error)
            return try transactionOnce(body)
        }
    }

    private func transactionOnce<R>(_ body: () throws -> R) throws -> R {
        try execute("BEGIN")
        inTransaction = true
        defer { inTransaction = false }
        do {
            let value = try body()
            try execute("COMMIT")
            return value
        } catch {
            _ = try? execute("ROLLBACK")
            throw error
        }
    }
}

/// A statement and its parameters, for `PostgresConnection.pipelinedTransaction`.
struct PostgresStatement {
    var sql: String
    var parameters: [String?] = []
}

extension PostgresConnection {
    /// A transaction in two round trips however many statements it runs at each end: `opening`
    /// goes with BEGIN, and the statements `body` returns go with COMMIT (libpq's pipeline
    /// mode). `body` gets the opening statements' rows and may run statements of its own in
    /// between; its `finish` gets the closing statements' rows. Rolled back when anything
    /// throws; run again, once, on a new connection when the connection broke (nothing was
    /// committed), so both closures must be safe to run twice.
    func pipelinedTransaction<R>(opening: [PostgresStatement],
                                 _ body: ([[PostgresRow]]) throws -> (closing: [PostgresStatement], finish: ([[PostgresRow]]) throws -> R)) throws -> R {
        do {
            return try pipelinedTransactionOnce(opening: opening, body)
        } catch let error as StoreError where isBroken {
            try reconnect(after: error)
            return try pipelinedTransactionOnce(opening: opening, body)
        }
    }

    private func pipelinedTransactionOnce<R>(opening: [PostgresStatement],
                                             _ body: ([[PostgresRow]]) throws -> (closing: [PostgresStatement], finish: ([[PostgresRow]]) throws -> R)) throws -> R {
        inTransaction = true
        defer { inTransaction = false }
        do {
            let opened = try pipeline([PostgresStatement(sql: "BEGIN")] + opening).dropFirst()
            let (closing, finish) = try body(Array(opened))
            let closed = try pipeline(closing + [PostgresStatement(sql: "COMMIT")]).dropLast()
            return try finish(Array(closed))
        } catch {
            // A failed statement leaves the transaction aborted (a pipeline's sync does not end
            // an explicit one); a broken connection has none left, and is for the caller to renew.
            if !isBroken { _ = try? execute("ROLLBACK") }
            throw error
        }
    }
}

/// One result row, as text.
struct PostgresRow {
    let values: [String?]

    subscript(_ index: Int) -> String? { values[index] }
    func int(_ index: Int) -> Int64? { values[index].flatMap { Int64($0) } }
    func double(_ index: Int) -> Double? { values[index].flatMap { Double($0) } }
    func bool(_ index: Int) -> Bool { values[index] == "t" }
    func date(_ index: Int) -> Date? { double(index).map(Date.init(timeIntervalSince1970:)) }
}

extension PostgresConnection {
    /// Waits up to `timeout` seconds for notifications on the channels this connection
    /// LISTENs to (`LISTEN` through `executeScript`); returns how many arrived, 0 when none
    /// did. Throws when the connection broke: `renewAfterBreak` then brings it back.
    func awaitNotifications(timeout: TimeInterval) throws -> Int {
        guard let handle, PQstatus(handle) == CONNECTION_OK else { throw brokenListener("not connected") }
        var arrived = Self.drainNotifications(handle)
        guard arrived == 0 else { return arrived }
        var descriptor = pollfd(fd: PQsocket(handle), events: Int16(POLLIN), revents: 0)
        guard descriptor.fd >= 0 else { throw brokenListener("no socket") }
        let ready = poll(&descriptor, 1, Int32(max(0, timeout) * 1000))
        if ready > 0 {
            guard PQconsumeInput(handle) == 1 else { throw brokenListener(Self.message(of: handle)) }
            arrived = Self.drainNotifications(handle)
        }
        guard PQstatus(handle) == CONNECTION_OK else { throw brokenListener(Self.message(of: handle)) }
        return arrived
    }

    private static func drainNotifications(_ handle: OpaquePointer) -> Int {
        var count = 0
        while let notification = PQnotifies(handle) {
            count += 1
            PQfreemem(notification)
        }
        return count
    }

    private func brokenListener(_ message: String) -> StoreError {
        StoreError.postgres(target: shownTarget, message: "listening for changes: " + message, fix: "")
    }

    /// Connects a broken connection again, once; whether it is back.
    func renewAfterBreak() -> Bool {
        guard let handle else { return false }
        renew(handle)
        return PQstatus(handle) == CONNECTION_OK
    }
}
