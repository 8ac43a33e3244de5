import CSQLite
import Foundation

/// A thin, typed wrapper over one SQLite connection. Not thread-safe: the
/// store serialises access with a lock.
final class SQLiteDatabase {
    private var handle: OpaquePointer?
    private var statements: [String: OpaquePointer] = [:]
    let path: String

    init(path: String) throws {
        self.path = path
        let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX
        guard sqlite3_open_v2(path, &handle, flags, nil) == SQLITE_OK else {
            let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? "cannot open"
            sqlite3_close(handle)
            throw StoreError.sqlite(path: path, message: message)
        }
        sqlite3_busy_timeout(handle, 5000)
    }

    deinit {
        for statement in statements.values { sqlite3_finalize(statement) }
        sqlite3_close(handle)
    }

    /// Runs one or more statements without results.
    func execute(_ sql: String) throws {
        var error: UnsafeMutablePointer<CChar>?
        guard sqlite3_exec(handle, sql, nil, nil, &error) == SQLITE_OK else {
            let message = error.map { String(cString: $0) } ?? "unknown error"
            sqlite3_free(error)
            throw StoreError.sqlite(path: path, message: "\(message) in: \(sql.prefix(80))")
        }
    }

    /// Runs a statement with bound values; returns the rows.
    @discardableResult
    func query(_ sql: String, _ values: [SQLValue] = []) throws -> [[SQLValue]] {
        var rows: [[SQLValue]] = []
        try forEachRow(sql, values) { rows.append($0); return true }
        return rows
    }

    /// Runs a statement, handing each row to `body` until it returns false.
    func forEachRow(_ sql: String, _ values: [SQLValue] = [], _ body: ([SQLValue]) throws -> Bool) throws {
        let statement = try prepared(sql)
        defer { sqlite3_reset(statement); sqlite3_clear_bindings(statement) }
        for (offset, value) in values.enumerated() {
            let index = Int32(offset + 1)
            switch value {
            case .null: sqlite3_bind_null(statement, index)
            case .integer(let number): sqlite3_bind_int64(statement, index, number)
            case .real(let number): sqlite3_bind_double(statement, index, number)
            case .text(let text): tdc_sqlite3_bind_text_copy(statement, index, text, -1)
            }
        }
        while true {
            let step = sqlite3_step(statement)
            if step == SQLITE_DONE { break }
            guard step == SQLITE_ROW else {
                throw StoreError.sqlite(path: path, message: String(cString: sqlite3_errmsg(handle)))
            }
            let columns = sqlite3_column_count(statement)
            let row = (0..<columns).map { column -> SQLValue in
                switch sqlite3_column_type(statement, column) {
                case SQLITE_INTEGER: return .integer(sqlite3_column_int64(statement, column))
                case SQLITE_FLOAT: return .real(sqlite3_column_double(statement, column))
                case SQLITE_NULL: return .null
                default: return .text(String(cString: sqlite3_column_text(statement, column)))
                }
            }
            guard try body(row) else { break }
        }
    }

    var changes: Int { Int(sqlite3_changes(handle)) }

    /// Runs `body` in one transaction (BEGIN IMMEDIATE), rolling back if it throws.
    /// BEGIN, COMMIT and ROLLBACK run as statements prepared once: through `sqlite3_exec` each
    /// was parsed again, 3% of a queue's CPU with many small jobs (perf).
    func transaction<R>(_ body: () throws -> R) throws -> R {
        try forEachRow("BEGIN IMMEDIATE") { _ in true }
        do {
            let result = try body()
            try forEachRow("COMMIT") { _ in true }
            return result
        } catch {
            try? forEachRow("ROLLBACK") { _ in true }
            throw error
        }
    }

    private func prepared(_ sql: String) throws -> OpaquePointer {
        if let cached = statements[sql] { return cached }
        var statement: OpaquePointer?
        guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
            throw StoreError.sqlite(path: path, message: "\(String(cString: sqlite3_errmsg(handle))) in: \(sql.prefix(80))")
        }
        statements[sql] = statement
        return statement
    }
}

/// A value bound to or read from SQLite.
enum SQLValue: Equatable {
    case null
    case integer(Int64)
    case real(Double)
    case text(String)

    var int: Int64? { if case .integer(let v) = self { return v }; return nil }
    var string: String? { if case .text(let v) = self { return v }; return nil }
    var double: Double? {
        switch self {
        case .real(let v): return v
        case .integer(let v): return Double(v)
        default: return nil
        }
    }

    init(_ text: String?) { self = text.map { .text($0) } ?? .null }
    init(_ number: Int64?) { self = number.map { .integer($0) } ?? .null }
    init(_ number: Double?) { self = number.map { .real($0) } ?? .null }
}

/// Store failures: the database file and what SQLite said.
package enum StoreError: Error, CustomStringConvertible {
    case sqlite(path: String, message: String)
    case schemaTooNew(path: String, found: Int, supported: Int)
    case locked(path: String, holder: String)
    /// The file is not a SQLite database, or SQLite finds it damaged: never written to.
    case damaged(path: String, reason: String)
    /// A PostgreSQL store's error; `target` is its URL without the password.
    case postgres(target: String, message: String, fix: String, sqlState: String? = nil)
    /// A PostgreSQL store that cannot be used as it is (connection, rights, schema): one
    /// sentence with the store and the fix (`StoreFailure` tells the causes apart).
    case unusable(StoreProblem)

    package var description: String {
        switch self {
        case .sqlite(let path, let message):
            return "state store \(path): \(message)"
        case .schemaTooNew(let path, let found, let supported):
            return "state store \(path) has schema version \(found); this transferd understands up to \(supported) — use a newer transferd"
        case .damaged(let path, let reason):
            return "state store \(path) \(reason); it is left as it is — move it aside, or restore it from a backup"
        case .locked(let path, let holder):
            return "another transferd run is working this queue (\(holder)); lock: \(path)"
        case .postgres(let target, let message, let fix, _):
            return "state store \(target): \(message)" + (fix.isEmpty ? "" : " — \(fix)")
        case .unusable(let problem):
            return problem.description
        }
    }
}
