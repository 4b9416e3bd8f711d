/** Volumes and their files: browse, upload, download, remove. */
import { useRoute } from "preact-iso"
import { api, type FileList, path, type VolumeInfo } from "../Api.ts"
import { ConfirmButton, ErrorNote, Loading, Page, Table, Time, useAction, useLoad } from "../ui.tsx"

const bytes = (size: number) =>
  size < 1024 ? `${size} B` : size < 1048576 ? `${(size / 1024).toFixed(1)} KB` : `${(size / 1048576).toFixed(1)} MB`

/** A file's path in a URL: each segment encoded. */
const filePath = (volumeId: string, file: string) =>
  `/v1/volumes/${encodeURIComponent(volumeId)}/files/${
    file.replace(/^\/+/, "").split("/").map(encodeURIComponent).join("/")
  }`

export const Volumes = () => {
  const volumes = useLoad(() => api<Array<VolumeInfo>>("/v1/volumes?limit=200"), [])
  return (
    <Page title="Volumes">
      <ErrorNote error={volumes.error} />
      {volumes.data === undefined ? <Loading what="volumes" /> : (
        <Table
          label="Volumes"
          rows={volumes.data}
          rowKey={(volume) => volume.id}
          empty="No volumes."
          columns={[
            {
              label: "Volume",
              render: (volume) => (
                <a href={`/console/volumes/${encodeURIComponent(volume.id)}`}>{volume.name ?? volume.id}</a>
              )
            },
            {
              label: "Agent",
              render: (volume) =>
                volume.agentId === null
                  ? <span class="muted">none</span>
                  : (
                    <a class="mono small" href={`/console/agents/${encodeURIComponent(volume.agentId)}`}>
                      {volume.agentId}
                    </a>
                  )
            },
            { label: "Files", class: "number", render: (volume) => volume.files },
            { label: "Size", class: "number", render: (volume) => bytes(volume.bytes) },
            { label: "Created", render: (volume) => <Time at={volume.createdAt} /> }
          ]}
        />
      )}
    </Page>
  )
}

export const VolumeView = () => {
  const { params } = useRoute()
  const id = params.id!
  const volume = useLoad(() => api<VolumeInfo>(path`/v1/volumes/${id}`), [id])
  const files = useLoad(() => api<FileList>(path`/v1/volumes/${id}/files`), [id])
  const action = useAction()
  return (
    <Page title={volume.data?.name ?? id}>
      <form
        class="card form inline"
        aria-label="Upload"
        onSubmit={async (event) => {
          event.preventDefault()
          const form = event.currentTarget
          const data = new FormData(form)
          const file = data.get("file")
          const folder = String(data.get("folder") ?? "").trim().replace(/^\/+|\/+$/g, "")
          if (!(file instanceof File) || file.name === "") return
          const sent = await action.run(() =>
            api(filePath(id, folder === "" ? file.name : `${folder}/${file.name}`), { method: "PUT", raw: file })
          )
          if (sent !== undefined) {
            form.reset()
            files.reload()
          }
        }}
      >
        <label class="field">
          <span class="field-label">File</span>
          <input type="file" name="file" required />
        </label>
        <label class="field">
          <span class="field-label">Folder</span>
          <input name="folder" placeholder="(the top)" autoComplete="off" />
        </label>
        <button type="submit" disabled={action.busy}>Upload</button>
      </form>
      <ErrorNote error={action.error ?? files.error ?? volume.error} />
      {files.data === undefined ? <Loading what="files" /> : (
        <Table
          label="Files"
          rows={files.data.files}
          rowKey={(file) => file.path}
          empty="No files."
          columns={[
            {
              label: "Path",
              render: (file) => <a href={filePath(id, file.path)} download class="mono small">{file.path}</a>
            },
            { label: "Size", class: "number", render: (file) => bytes(file.size) },
            { label: "Type", render: (file) => <span class="small">{file.contentType}</span> },
            { label: "Updated", render: (file) => <Time at={file.updatedAt} /> },
            {
              label: "",
              class: "row-actions",
              render: (file) => (
                <ConfirmButton
                  confirm={`Remove ${file.path}`}
                  onConfirm={() =>
                    action.run(() => api(filePath(id, file.path), { method: "DELETE" })).then(files.reload)}
                >
                  Remove
                </ConfirmButton>
              )
            }
          ]}
        />
      )}
      {files.data?.next === undefined ? null : <p class="muted">More files follow; the first page is shown.</p>}
    </Page>
  )
}
