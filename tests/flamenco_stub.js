// A stub of Flamenco's job-compiler authoring API (author.Task, author.Command, task.addCommand,
// task.addDependency, job.addTask, job.settings), enough to run a job type under node and print its task graph.
// Usage: node tests/flamenco_stub.js JOBTYPE.js 'SETTINGS_JSON'  -> {"tasks": [{name, type, commands, deps}]}
const fs = require("fs");
const vm = require("vm");

const tasks = [];
const author = {
    Task(name, type) {
        const task = { name, type, commands: [], deps: [] };
        task.addCommand = (command) => { task.commands.push(command); };
        task.addDependency = (other) => {
            if (!other || typeof other.name !== "string") throw new Error("addDependency: not a task");
            task.deps.push(other.name);
        };
        return task;
    },
    Command(name, parameters) { return { name, parameters }; },
};
const job = {
    settings: JSON.parse(process.argv[3]),
    addTask(task) { tasks.push(task); },
};
const context = vm.createContext({ author, print: console.log });
vm.runInContext(fs.readFileSync(process.argv[2], "utf8") + "\n;this.JOB_TYPE = JOB_TYPE; this.compileJob = compileJob;",
                context);
if (typeof context.JOB_TYPE.label !== "string" || !Array.isArray(context.JOB_TYPE.settings))
    throw new Error("JOB_TYPE needs a label and settings");
context.compileJob(job);
console.log(JSON.stringify({
    label: context.JOB_TYPE.label,
    settings: context.JOB_TYPE.settings.map((s) => s.key),
    tasks: tasks.map(({ name, type, commands, deps }) => ({ name, type, commands, deps })),
}));
