@testable import PGPushStore
import Testing

struct SQLScriptTests {
    @Test func splitsAtTopLevelSemicolonsOnly() {
        let script = """
            -- a comment; with a semicolon
            CREATE TABLE t (a text DEFAULT 'x;y', "odd;name" int);
            /* block; /* nested; */ still comment; */
            CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $body$
            BEGIN RETURN 1; END;
            $body$;
            DO $$ BEGIN PERFORM 'it''s;'; END $$;
            SELECT $1::int;
            -- trailing comment only
            """
        let statements = SQLScript.statements(script)
        #expect(statements.count == 4)
        #expect(statements[0].hasSuffix(#"CREATE TABLE t (a text DEFAULT 'x;y', "odd;name" int)"#))
        #expect(statements[1].contains("BEGIN RETURN 1; END;"))
        #expect(statements[1].hasSuffix("$body$"))
        #expect(statements[2] == "DO $$ BEGIN PERFORM 'it''s;'; END $$")
        #expect(statements[3] == "SELECT $1::int")
    }

    @Test func everyEmbeddedMigrationSplitsIntoCompleteStatements() {
        for migration in Migration.embedded {
            let statements = SQLScript.statements(migration.sql)
            #expect(!statements.isEmpty, "\(migration.name) has no statements")
            for statement in statements {
                // A dollar-quoted body cut in half would leave an odd number of `$$`.
                #expect(statement.components(separatedBy: "$$").count % 2 == 1, "\(migration.name): \(statement.prefix(80))")
            }
        }
    }
}
