// Compiled (never run) by types.test.mjs with `tsc --noEmit --strict`: the hand-written
// wds.d.ts must type these ordinary uses, and reject the wrong ones marked @ts-expect-error.
import { createClient, flattenRecord, type Row, type WdsError, type WdsResponse, type ChangePayload } from "../../wds.js";

interface Task {
  Title: string;
  Score: number | null;
  Tags: string[];
}

async function main(): Promise<void> {
  const client = createClient("https://data.example.com", { workspaceId: 1, storage: undefined });
  const list = await client.from<Task>("Tasks").select("Title,Score", { count: "exact" }).gt("Score", 3).in("Title", ["a", "b"]).order("Score", { ascending: false }).range(0, 9);
  if (list.error) {
    const e: WdsError = list.error;
    console.log(e.code, e.status, e.message);
  } else if (list.data) {
    const first: Row<Task> | undefined = list.data[0];
    const title: string | undefined = first?.Title;
    const id: number | undefined = first?.id;
    console.log(title, id, list.count);
  }
  const one = await client.from<Task>(3).select().eq("id", 4).single();
  const row: Row<Task> | null = one.data;
  console.log(row?.Score);
  const inserted = await client.from<Task>("Tasks").insert({ Title: "x", Tags: ["a"] }, { runPipeline: false });
  console.log(inserted.data?.created_at);
  const many = await client.from<Task>("Tasks").insert([{ Title: "y" }, { Title: "z" }]);
  console.log(many.data?.[1]?.Title);
  const updated: WdsResponse<Row<Task>[]> = await client.from<Task>("Tasks").update({ Score: 1 }).contains("Tags", ["a"]).not("Score", "is", null);
  console.log(updated.count);
  const grouped = await client.from<Task>("Tasks").select().or("Score.gt.3,Title.is.null").and("Score.gt.0,Score.lt.10", { negate: true });
  console.log(grouped.data?.length);
  const deleted = await client.from("Tasks").delete().eq("id", 5);
  console.log(deleted.data?.[0]?.deleted);
  const s = await client.auth.signInWithPassword({ email: "a@example.com", password: "secret secret" });
  console.log(s.data?.session?.access_token, s.data?.user?.email);
  client.auth.onAuthStateChange((event, session) => console.log(event, session?.expires_at));
  const ch = client.channel<Task>("Tasks", { filter: { Score: "gt.3" } })
    .on("INSERT", (c: ChangePayload<Task>) => console.log(c.record?.Title, c.seq))
    .on("error", (e) => console.log(e.code))
    .subscribe((status) => console.log(status));
  await ch.unsubscribe();
  const up = await client.storage.from("avatars").upload("users/1/a.png", new Blob([]), { contentType: "image/png" });
  console.log(up.data?.size);
  const url = await client.storage.from("avatars").getPublicUrl("users/1/a.png");
  console.log(url.data?.publicUrl);
  const signed = await client.storage.from("docs").createSignedUrl("x.pdf", 60);
  console.log(signed.data?.signedUrl);
  const sql = await client.sql<{ Title: string }>("SELECT Title FROM Tasks");
  console.log(sql.data?.rows?.[0]?.Title);
  const run = await client.runActions("Tasks", { filters: { Score: "gt.1" }, columnIds: [3] });
  console.log(run.data?.run_id);
  console.log((await client.run("Tasks", 1, { mode: "edit", changedColumns: ["Score"] })).data?.pipeline.status);
  console.log((await client.compute("Tasks", 1, "Total")).data?.value);
  console.log((await client.search<Task>("Tasks", "hello", { limit: 5 })).data?.[0]?.record.Title);
  console.log(flattenRecord({ id: 1, fields: { a: 1 }, created_at: "", updated_at: "" }).a);

  // @ts-expect-error limit takes a number
  client.from("Tasks").select().limit("5");
  // @ts-expect-error not an operator
  client.from("Tasks").select().not("Score", "between", 1);
  // @ts-expect-error order options are an object
  client.from("Tasks").select().order("Score", "desc");
}

void main();
