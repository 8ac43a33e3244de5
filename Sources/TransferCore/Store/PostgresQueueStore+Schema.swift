import Foundation

/// The schema: its versions, and how a store checks or brings it up to date.
extension PostgresQueueStore {
    // MARK: Schema

    /// Each entry brings the schema from version `index` to `index + 1`.
    static let migrations: [String] = [
        """
        CREATE TABLE transferd_jobs (
            seq BIGSERIAL PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            kind TEXT NOT NULL,
            host TEXT NOT NULL,
            spec TEXT NOT NULL,
            source_file TEXT NOT NULL,
            priority INTEGER NOT NULL DEFAULT 0,
            connections INTEGER,
            state TEXT NOT NULL,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at DOUBLE PRECISION,
            last_error TEXT,
            bytes_done BIGINT NOT NULL DEFAULT 0,
            bytes_total BIGINT,
            speed DOUBLE PRECISION,
            sha256 TEXT,
            created_at DOUBLE PRECISION NOT NULL,
            started_at DOUBLE PRECISION,
            finished_at DOUBLE PRECISION,
            cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
            checkpoint TEXT,
            worker TEXT,
            epoch BIGINT NOT NULL DEFAULT 0,
            lease_expires DOUBLE PRECISION
        );
        CREATE INDEX transferd_jobs_runnable ON transferd_jobs (state, priority DESC, seq);
        CREATE INDEX transferd_jobs_source ON transferd_jobs (source_file, seq);
        CREATE INDEX transferd_jobs_worker ON transferd_jobs (worker) WHERE worker IS NOT NULL;
        CREATE TABLE transferd_files (
            content_sha256 TEXT PRIMARY KEY,
            file_name TEXT NOT NULL,
            jobs INTEGER NOT NULL,
            ingested_at DOUBLE PRECISION NOT NULL
        );
        CREATE TABLE transferd_workers (
            name TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            pid INTEGER NOT NULL,
            started_at DOUBLE PRECISION NOT NULL,
            heartbeat_at DOUBLE PRECISION NOT NULL
        )
        """,
        // 2: the connections a running job uses (per-host limits count the fleet), and the
        // per-host limits each worker lowered after 429s and 503s, for `status`.
        """
        ALTER TABLE transferd_jobs ADD COLUMN held_connections INTEGER NOT NULL DEFAULT 0;
        CREATE TABLE transferd_host_limits (
            worker TEXT NOT NULL,
            host TEXT NOT NULL,
            connection_limit INTEGER NOT NULL,
            maximum INTEGER NOT NULL,
            PRIMARY KEY (worker, host)
        )
        """,
        // 3: what a finished job's hook did.
        """
        ALTER TABLE transferd_jobs ADD COLUMN hook TEXT
        """,
        // 4: the queue's own settings (whether it is paused as a whole).
        """
        CREATE TABLE transferd_settings (
            name TEXT PRIMARY KEY,
            value TEXT NOT NULL
        )
        """,
        // 5: ids in byte order, whatever the database's collation, for ids typed by a
        // prefix (`jobIDs(startingWith:limit:)`).
        """
        CREATE INDEX transferd_jobs_id_bytes ON transferd_jobs (id COLLATE "C")
        """,
    ]

    package static var schemaVersion: Int { migrations.count }

    /// The schema's version (0: none), and whether a `transferd_jobs` table exists without
    /// `transferd_schema` (someone else's table of that name). Reads only, so a role without
    /// CREATE can use a store another role made.
    func foundSchemaVersion() throws -> Int {
        let tables = try connection.query("""
            SELECT to_regclass('transferd_schema') IS NOT NULL, to_regclass('transferd_jobs') IS NOT NULL
            """).first
        guard tables?.bool(0) == true else {
            if tables?.bool(1) == true {
                throw connection.problem(.foreignTable("table \"transferd_jobs\" exists, but not transferd_schema, which transferd makes with it"))
            }
            return 0
        }
        let version = Int(try connection.query("SELECT max(version) FROM transferd_schema").first?.int(0) ?? 0)
        guard version <= Self.migrations.count else {
            throw connection.problem(.schemaNewer(found: version, supported: Self.migrations.count))
        }
        if version == 0, tables?.bool(1) == true {
            throw connection.problem(.foreignTable("table \"transferd_jobs\" exists, but transferd_schema records no version"))
        }
        return version
    }

    /// For a read-only look: the schema as this transferd reads it, or why not.
    func checkSchema() throws {
        let version = try foundSchemaVersion()
        if version == 0 { throw connection.problem(.noQueueYet) }
        if version < Self.migrations.count {
            throw connection.problem(.schemaOlder(found: version, supported: Self.migrations.count))
        }
    }

    func migrate() throws {
        // Up to date: nothing to create (a role that may not create tables still works).
        if try foundSchemaVersion() == Self.migrations.count { return }
        try connection.transaction {
            // Workers starting together migrate one at a time.
            try connection.execute("SELECT pg_advisory_xact_lock(7372657)")
            try connection.execute("CREATE TABLE IF NOT EXISTS transferd_schema (version INTEGER NOT NULL)")
            // Again under the lock: another worker may have migrated meanwhile.
            let version = try foundSchemaVersion()
            for step in version..<Self.migrations.count {
                try connection.executeScript(Self.migrations[step])
                try connection.execute("INSERT INTO transferd_schema (version) VALUES ($1)", [String(step + 1)])
            }
        }
    }
}
