import Crypto
import Foundation

/// One ordered SQL file from `Migrations/`.
public struct Migration: Sendable, Hashable {
    /// The file name, e.g. `0001_schema.sql`; its numeric prefix orders it.
    public var name: String
    public var sql: String

    public init(name: String, sql: String) {
        self.name = name
        self.sql = sql
    }

    /// The version recorded in `push.schema_migrations`: the file name without `.sql`.
    public var version: String {
        name.hasSuffix(".sql") ? String(name.dropLast(4)) : name
    }

    /// SHA-256 of the file's bytes, hex: a recorded migration whose file changed is refused.
    public var checksum: String {
        SHA256.hash(data: Data(sql.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}

extension Migration {
    /// The migrations compiled into this binary, in order. Package.swift lists the same files.
    public static let embedded: [Migration] = [
        Migration(name: "0001_schema.sql", sql: String(decoding: PackageResources._001_schema_sql, as: UTF8.self)),
        Migration(name: "0002_producer_api.sql", sql: String(decoding: PackageResources._002_producer_api_sql, as: UTF8.self)),
        Migration(name: "0003_views.sql", sql: String(decoding: PackageResources._003_views_sql, as: UTF8.self)),
        Migration(name: "0004_partitions.sql", sql: String(decoding: PackageResources._004_partitions_sql, as: UTF8.self)),
        Migration(name: "0005_roles.sql", sql: String(decoding: PackageResources._005_roles_sql, as: UTF8.self)),
        Migration(name: "0006_scheduler.sql", sql: String(decoding: PackageResources._006_scheduler_sql, as: UTF8.self)),
        Migration(name: "0007_app_valve.sql", sql: String(decoding: PackageResources._007_app_valve_sql, as: UTF8.self)),
        Migration(name: "0008_tenancy.sql", sql: String(decoding: PackageResources._008_tenancy_sql, as: UTF8.self)),
        Migration(name: "0009_fcm_schema.sql", sql: String(decoding: PackageResources._009_fcm_schema_sql, as: UTF8.self)),
        Migration(name: "0010_fcm_sending.sql", sql: String(decoding: PackageResources._010_fcm_sending_sql, as: UTF8.self)),
        Migration(name: "0011_job_platforms.sql", sql: String(decoding: PackageResources._011_job_platforms_sql, as: UTF8.self)),
        Migration(name: "0012_one_enqueue_trigger.sql", sql: String(decoding: PackageResources._012_one_enqueue_trigger_sql, as: UTF8.self)),
        Migration(name: "0013_device_field_bounds.sql", sql: String(decoding: PackageResources._013_device_field_bounds_sql, as: UTF8.self)),
        Migration(name: "0014_chunks_without_job_key.sql", sql: String(decoding: PackageResources._014_chunks_without_job_key_sql, as: UTF8.self)),
        Migration(name: "0015_pooled_topology.sql", sql: String(decoding: PackageResources._015_pooled_topology_sql, as: UTF8.self)),
        Migration(name: "0016_job_audience.sql", sql: String(decoding: PackageResources._016_job_audience_sql, as: UTF8.self)),
        Migration(name: "0017_live_activities.sql", sql: String(decoding: PackageResources._017_live_activities_sql, as: UTF8.self)),
        Migration(name: "0018_dashboard_roles.sql", sql: String(decoding: PackageResources._018_dashboard_roles_sql, as: UTF8.self)),
        Migration(name: "0019_dashboard_grants.sql", sql: String(decoding: PackageResources._019_dashboard_grants_sql, as: UTF8.self)),
        Migration(name: "0020_cheaper_enqueue.sql", sql: String(decoding: PackageResources._020_cheaper_enqueue_sql, as: UTF8.self)),
        Migration(name: "0021_large_job_look.sql", sql: String(decoding: PackageResources._021_large_job_look_sql, as: UTF8.self)),
        Migration(name: "0022_enqueue_fast_path.sql", sql: String(decoding: PackageResources._022_enqueue_fast_path_sql, as: UTF8.self)),
        Migration(name: "0023_per_device_content.sql", sql: String(decoding: PackageResources._023_per_device_content_sql, as: UTF8.self)),
        Migration(name: "0024_labels_replace_resend.sql", sql: String(decoding: PackageResources._024_labels_replace_resend_sql, as: UTF8.self)),
        Migration(name: "0025_job_events.sql", sql: String(decoding: PackageResources._025_job_events_sql, as: UTF8.self)),
        Migration(name: "0026_dashboard_resend.sql", sql: String(decoding: PackageResources._026_dashboard_resend_sql, as: UTF8.self)),
        Migration(name: "0027_web_push.sql", sql: String(decoding: PackageResources._027_web_push_sql, as: UTF8.self)),
        Migration(name: "0028_broadcast_controls.sql", sql: String(decoding: PackageResources._028_broadcast_controls_sql, as: UTF8.self)),
    ]

    /// Reads every `*.sql` file of a directory, ordered by name; for `pgpush migrate --directory`.
    public static func load(directory: String) throws -> [Migration] {
        let names = try FileManager.default.contentsOfDirectory(atPath: directory)
            .filter { $0.hasSuffix(".sql") }
            .sorted()
        return try names.map { name in
            let data = try Data(contentsOf: URL(fileURLWithPath: directory).appendingPathComponent(name))
            return Migration(name: name, sql: String(decoding: data, as: UTF8.self))
        }
    }
}
