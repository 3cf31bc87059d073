-- What Migrations/current/roles.sql says and pg_dump does not: the database-wide part of the schema, which
-- `pg_dump --schema=push` leaves out. scripts/current-schema runs it against a freshly migrated database (its
-- own, or the test's for CurrentSchemaTests) and adds each row to the named file, after pg_dump's entries.
-- One row per entry (file, key, text), in a stable order (by key in the C collation).
--
-- Roles are the ones the push schema's privileges and policies name (not their object's owner), and every role
-- those are members of: a cluster holds other roles too (login users, other databases' roles, a test's), and
-- these are the ones the migrations make and grant to. Memberships are listed where the member is such a role,
-- never where it is some login user. Database settings are the migrated database's own (ALTER DATABASE … SET),
-- with its name left out, since it is whatever database was migrated.
WITH RECURSIVE push AS (
    SELECT oid, nspacl, nspowner FROM pg_namespace WHERE nspname = 'push'
), named(role) AS (
    SELECT a.grantee FROM push, aclexplode(push.nspacl) a WHERE a.grantee <> push.nspowner
    UNION SELECT a.grantee FROM pg_class c JOIN push ON c.relnamespace = push.oid, aclexplode(c.relacl) a
     WHERE a.grantee <> c.relowner
    UNION SELECT a.grantee FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid JOIN push ON c.relnamespace = push.oid,
                 aclexplode(t.attacl) a
     WHERE a.grantee <> c.relowner
    UNION SELECT a.grantee FROM pg_proc p JOIN push ON p.pronamespace = push.oid, aclexplode(p.proacl) a
     WHERE a.grantee <> p.proowner
    UNION SELECT r FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid JOIN push ON c.relnamespace = push.oid,
                 unnest(p.polroles) r
    UNION SELECT a.grantee FROM pg_default_acl d JOIN push ON d.defaclnamespace = push.oid, aclexplode(d.defaclacl) a
), closure(role) AS (
    SELECT role FROM named WHERE role <> 0
    UNION SELECT m.roleid FROM pg_auth_members m JOIN closure c ON m.member = c.role
), roles AS (
    SELECT r.* FROM pg_roles r WHERE r.oid IN (SELECT role FROM closure) AND r.rolname !~ '^pg_'
), entries(file, key, text) AS (
    SELECT 'roles.sql', '1 ' || r.rolname,
           format(E'-- ROLE %s\nCREATE ROLE %I%s;\n', r.rolname, r.rolname,
                  concat(CASE WHEN r.rolsuper THEN ' SUPERUSER' END, CASE WHEN r.rolcreatedb THEN ' CREATEDB' END,
                         CASE WHEN r.rolcreaterole THEN ' CREATEROLE' END, CASE WHEN NOT r.rolinherit THEN ' NOINHERIT' END,
                         CASE WHEN r.rolcanlogin THEN ' LOGIN' ELSE ' NOLOGIN' END,
                         CASE WHEN r.rolreplication THEN ' REPLICATION' END, CASE WHEN r.rolbypassrls THEN ' BYPASSRLS' END,
                         CASE WHEN r.rolconnlimit <> -1 THEN ' CONNECTION LIMIT ' || r.rolconnlimit END))
           || coalesce((SELECT string_agg(format(E'GRANT %I TO %I%s;\n', g.rolname, r.rolname,
                                                 CASE WHEN m.admin_option THEN ' WITH ADMIN OPTION' ELSE '' END),
                                          '' ORDER BY g.rolname COLLATE "C")
                          FROM pg_auth_members m JOIN pg_roles g ON g.oid = m.roleid WHERE m.member = r.oid), '')
           || coalesce((SELECT string_agg(format(E'ALTER ROLE %I SET %s;\n', r.rolname, setting), ''
                                          ORDER BY setting COLLATE "C")
                          FROM pg_db_role_setting s, unnest(s.setconfig) setting
                         WHERE s.setrole = r.oid AND s.setdatabase = 0), '')
      FROM roles r
    UNION ALL
    SELECT 'roles.sql', '2 ' || setting,
           format(E'-- DATABASE SETTING %s (of the migrated database, whatever its name)\nALTER DATABASE "<database>" SET %s;\n',
                  split_part(setting, '=', 1), setting)
      FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase, unnest(s.setconfig) setting
     WHERE d.datname = current_database() AND s.setrole = 0
)
SELECT file, key, text FROM entries ORDER BY file COLLATE "C", key COLLATE "C";
