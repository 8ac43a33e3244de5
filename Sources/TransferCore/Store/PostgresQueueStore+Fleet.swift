import Foundation

/// The fleet: leases renewed and lost, the worker list, rate shares and per-host limits.
extension PostgresQueueStore {
    /// Extends this worker's leases and records its heartbeat.
    /// - Returns: the jobs it no longer holds (their lease ran out and another worker took them,
    ///   or a user cancelled them while they were finishing): their tasks must stop.
    public func renewLeases() throws -> Set<String> {
        let sentAt = LeaseClock.now()
        return try locked {
            // What this process holds, by id: a job its name held before a restart is left to expire.
            let rows = try connection.query("""
                UPDATE transferd_jobs SET lease_expires = \(Self.serverNow) + $2
                WHERE worker = $1 AND state IN ('running', 'finishing') AND id = ANY($3::text[])
                RETURNING id, epoch
                """, [worker, String(lease), Self.array(Array(held.keys))])
            try connection.execute("UPDATE transferd_workers SET heartbeat_at = \(Self.serverNow) WHERE name = $1", [worker])
            var renewed: [String: Int64] = [:]
            for row in rows { renewed[row[0] ?? ""] = row.int(1) ?? -1 }
            var lostNow: Set<String> = []
            for (id, epoch) in held {
                if renewed[id] == epoch { heldSince[id] = sentAt } else { lostNow.insert(id) }
            }
            for id in lostNow { release(id, changed: 0) }
            // Jobs a person held stop through `steering`; they are not lost.
            return lostNow.filter { lost[$0] != nil }
        }
    }

    /// `rate` divided among the workers that renewed within three leases (this one included).
    public func rateShare(of rate: Int64) throws -> Int64 {
        try locked {
            let live = try connection.query("""
                SELECT count(*) FROM transferd_workers WHERE heartbeat_at >= \(Self.serverNow) - $1 OR name = $2
                """, [String(lease * 3), worker]).first?.int(0) ?? 1
            return max(1, rate / max(1, live))
        }
    }

    public func workers() throws -> [WorkerInfo] {
        try locked {
            try connection.query("""
                SELECT w.name, w.host, w.pid, w.heartbeat_at, \(Self.serverNow),
                    (SELECT count(*) FROM transferd_jobs j WHERE j.worker = w.name AND j.state IN ('running', 'finishing'))
                FROM transferd_workers w ORDER BY w.name
                """).map { row in
                WorkerInfo(name: row[0] ?? "", host: row[1] ?? "", pid: Int(row.int(2) ?? 0),
                           lastHeartbeat: row.date(3) ?? .distantPast,
                           secondsSinceHeartbeat: (row.double(4) ?? 0) - (row.double(3) ?? 0),
                           jobsHeld: Int(row.int(5) ?? 0))
            }
        }
    }

    /// Removes this worker from the worker list (at the end of its run), with its host limits.
    public func retire() throws {
        try locked {
            _ = try connection.execute("DELETE FROM transferd_workers WHERE name = $1", [worker])
            _ = try connection.execute("DELETE FROM transferd_host_limits WHERE worker = $1", [worker])
        }
    }

    public func saveHostLimits(_ limits: [String: Int], maximum: Int) throws {
        try locked {
            try connection.transaction {
                let before = try connection.query("SELECT host, connection_limit FROM transferd_host_limits WHERE worker = $1",
                                                  [worker])
                var earlier: [String: Int] = [:]
                for row in before { earlier[row[0] ?? ""] = Int(row.int(1) ?? 0) }
                try connection.execute("DELETE FROM transferd_host_limits WHERE worker = $1", [worker])
                for (host, limit) in limits {
                    try connection.execute("""
                        INSERT INTO transferd_host_limits (worker, host, connection_limit, maximum) VALUES ($1, $2, $3, $4)
                        """, [worker, host, String(limit), String(maximum)])
                }
                // The other workers take each other's cuts (`QueueRunner.adoptFleetHostCuts`): a cut is
                // told at once; a limit rising back, or cleared, is news to nobody.
                if limits.contains(where: { host, limit in limit < earlier[host] ?? Int.max }) { try notifyChange() }
            }
        }
    }

    public func hostLimits() throws -> [HostLimitInfo] {
        try locked {
            try connection.query("""
                SELECT host, connection_limit, maximum, worker FROM transferd_host_limits ORDER BY host, worker
                """).map { row in
                HostLimitInfo(host: row[0] ?? "", limit: Int(row.int(1) ?? 0), maximum: Int(row.int(2) ?? 0), worker: row[3])
            }
        }
    }
}
